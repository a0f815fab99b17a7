package poolcache

import (
	"cmp"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/drausage"
)

const driver = "gpu.example.com"

func pool(name string) drausage.PoolID { return drausage.PoolID{Driver: driver, Pool: name} }

func slice(name, poolName string, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver,
			Pool:   resourceapi.ResourcePool{Name: poolName, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

func claim(name, rv string, devices ...drausage.PoolID) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), ResourceVersion: rv}}
	if len(devices) > 0 {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, id := range devices {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: id.Driver, Pool: id.Pool, Device: "gpu-0"})
		}
	}
	return c
}

// allocatedIn returns the allocated count of a pool's snapshot, or -1 if none.
func allocatedIn(c *Cache, id drausage.PoolID) int {
	s := c.Get(id)
	if s == nil {
		return -1
	}
	return s.Summary.Allocated
}

func TestOnlyTouchedPoolsAreRecomputed(t *testing.T) {
	c := New(Options{})
	var told [][]drausage.PoolID
	c.Subscribe(func(changed []drausage.PoolID) {
		slices.SortFunc(changed, func(a, b drausage.PoolID) int { return cmp.Compare(a.Pool, b.Pool) })
		told = append(told, changed)
	})
	c.SetSlice(slice("a", "node-a", "gpu-0", "gpu-1"))
	c.SetSlice(slice("b", "node-b", "gpu-0"))
	c.Sync()
	before := c.Get(pool("node-b")).Version

	c.SetClaim(claim("x", "10", pool("node-a")))
	if changed := c.Sync(); !gocmp.Equal(changed, []drausage.PoolID{pool("node-a")}) {
		t.Errorf("recomputed %v, want only node-a", changed)
	}
	if got := allocatedIn(c, pool("node-a")); got != 1 {
		t.Errorf("node-a allocated %d, want 1", got)
	}
	if got := c.Get(pool("node-b")).Version; got != before {
		t.Errorf("node-b snapshot changed version %d -> %d without a change", before, got)
	}
	if c.Sync() != nil {
		t.Error("a Sync without changes recomputed something")
	}
	want := [][]drausage.PoolID{{pool("node-a"), pool("node-b")}, {pool("node-a")}}
	if diff := gocmp.Diff(want, told); diff != "" {
		t.Errorf("listener calls (-want +got):\n%s", diff)
	}
}

func TestInFlightAllocations(t *testing.T) {
	c := New(Options{})
	c.SetSlice(slice("a", "node-a", "gpu-0"))
	unallocated := claim("x", "10")
	c.SetClaim(unallocated)
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 0 {
		t.Fatalf("allocated %d before anything happened", got)
	}

	// Reserve: the device is allocated before anything is written.
	c.PendingAllocation(claim("x", "10", pool("node-a")))
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 1 {
		t.Errorf("pending allocation: allocated %d, want 1", got)
	}

	// PreBind wrote it and assumed the result, then the pending entry went;
	// the informer has not caught up: still allocated, no flicker.
	c.Assumed(claim("x", "11", pool("node-a")))
	c.PendingAllocationRemoved("x")
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 1 {
		t.Errorf("assumed allocation: allocated %d, want 1", got)
	}

	// An informer event older than the assumed version changes nothing.
	c.SetClaim(unallocated)
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 1 {
		t.Errorf("stale informer event: allocated %d, want 1", got)
	}

	// The informer catches up; then the claim is deallocated for real.
	c.SetClaim(claim("x", "11", pool("node-a")))
	c.SetClaim(claim("x", "12"))
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 0 {
		t.Errorf("after deallocation: allocated %d, want 0", got)
	}
}

func TestGivenUpAndFailedAllocations(t *testing.T) {
	c := New(Options{})
	c.SetSlice(slice("a", "node-a", "gpu-0"))
	c.SetClaim(claim("x", "10"))

	c.PendingAllocation(claim("x", "10", pool("node-a")))
	c.PendingAllocationRemoved("x") // Unreserve
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 0 {
		t.Errorf("after Unreserve: allocated %d, want 0", got)
	}

	c.Assumed(claim("x", "11", pool("node-a")))
	c.AssumeRestored("ns", "x") // the write failed
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 0 {
		t.Errorf("after a failed write: allocated %d, want 0", got)
	}

	c.PendingAllocation(claim("x", "10", pool("node-a")))
	c.DeleteClaim(claim("x", "10"))
	c.Sync()
	if got := allocatedIn(c, pool("node-a")); got != 0 {
		t.Errorf("after the claim was deleted: allocated %d, want 0", got)
	}
}

func TestPoolsComeAndGo(t *testing.T) {
	c := New(Options{})
	var removed []drausage.PoolID
	c.Subscribe(func(changed []drausage.PoolID) {
		for _, id := range changed {
			if c.Get(id) == nil {
				removed = append(removed, id)
			}
		}
	})
	s0, s1 := slice("fabric-0", "fabric", "nic-0"), slice("fabric-1", "fabric", "nic-1")
	s0.Spec.Pool.ResourceSliceCount, s1.Spec.Pool.ResourceSliceCount = 2, 2
	c.SetSlice(s0)
	c.Sync()
	if s := c.Get(pool("fabric")); s == nil || s.Complete() {
		t.Fatalf("one of two slices: want an incomplete snapshot, got %+v", s)
	}
	c.SetSlice(s1)
	c.Sync()
	if s := c.Get(pool("fabric")); !s.Complete() || s.Summary.Total != 2 {
		t.Errorf("both slices: want complete with 2 devices, got %+v", s.PoolUsage)
	}

	// A claim naming a pool without slices makes no snapshot.
	c.SetClaim(claim("ghost", "1", pool("nowhere")))
	c.Sync()
	if c.Get(pool("nowhere")) != nil {
		t.Error("a pool without slices got a snapshot")
	}

	// A slice that moves to another pool leaves the first.
	moved := s1.DeepCopy()
	moved.Spec.Pool.Name = "fabric-b"
	c.SetSlice(moved)
	c.Sync()
	if got := c.Get(pool("fabric")).Summary.Total; got != 1 {
		t.Errorf("after a slice moved away: fabric has %d devices, want 1", got)
	}

	c.DeleteSlice(s0)
	c.DeleteSlice(moved)
	c.Sync()
	if len(c.List()) != 0 {
		t.Errorf("pools left after deleting every slice: %d", len(c.List()))
	}
	slices.SortFunc(removed, func(a, b drausage.PoolID) int { return cmp.Compare(a.Pool, b.Pool) })
	if diff := gocmp.Diff([]drausage.PoolID{pool("fabric"), pool("fabric-b")}, removed); diff != "" {
		t.Errorf("listener told of removals (-want +got):\n%s", diff)
	}
}

func TestDeviceTaintRules(t *testing.T) {
	c := New(Options{})
	c.SetSlice(slice("a", "node-a", "gpu-0", "gpu-1"))
	c.SetSlice(slice("b", "node-b", "gpu-0"))
	c.Sync()
	rule := &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Pool: ptr.To("node-a"), Device: ptr.To("gpu-1")},
			Taint:          resourceapi.DeviceTaint{Key: "maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}
	c.SetDeviceTaintRule(rule)
	if changed := c.Sync(); !gocmp.Equal(changed, []drausage.PoolID{pool("node-a")}) {
		t.Errorf("a rule for node-a recomputed %v", changed)
	}
	if got := c.Get(pool("node-a")).Summary.Unavailable; got != 1 {
		t.Errorf("unavailable %d, want 1", got)
	}
	c.DeleteDeviceTaintRule(rule)
	c.Sync()
	if got := c.Get(pool("node-a")).Summary.Unavailable; got != 0 {
		t.Errorf("after deleting the rule: unavailable %d, want 0", got)
	}
}

func TestInvalidateRecomputesWithNewHealth(t *testing.T) {
	unhealthy := map[string]bool{}
	c := New(Options{Usage: drausage.Options{
		WithholdUnhealthy: true,
		Health: func(_ drausage.PoolID, device string) drausage.DeviceHealth {
			if unhealthy[device] {
				return drausage.DeviceHealth{Status: v1.ResourceHealthStatusUnhealthy, Detail: "reported by pod default/p"}
			}
			return drausage.DeviceHealth{}
		},
	}})
	c.SetSlice(slice("a", "node-a", "gpu-0", "gpu-1"))
	c.Sync()
	unhealthy["gpu-1"] = true
	c.Invalidate(pool("node-a"), pool("no-such-pool"))
	if changed := c.Sync(); !gocmp.Equal(changed, []drausage.PoolID{pool("node-a")}) {
		t.Errorf("recomputed %v, want node-a (and no snapshot for a pool without slices)", changed)
	}
	if got := c.Get(pool("node-a")).Summary.Unavailable; got != 1 {
		t.Errorf("unavailable %d after gpu-1 turned Unhealthy, want 1", got)
	}
}

// A confirmation counts for the conflict as confirmed: not for one that
// ended before it arrived, nor once another claim joins.
func TestConfirmedConflicts(t *testing.T) {
	c := New(Options{})
	c.SetSlice(slice("a", "node-a", "gpu-0"))
	c.SetClaim(claim("x", "10", pool("node-a")))
	c.SetClaim(claim("y", "11", pool("node-a")))
	c.Sync()
	suspected := c.Get(pool("node-a")).Suspected
	if len(suspected) != 1 {
		t.Fatalf("suspected %v, want one conflict", suspected)
	}
	c.Confirm(pool("node-a"), suspected[0])
	c.Sync()
	if got := c.Get(pool("node-a")).Conflicts; len(got) != 1 {
		t.Fatalf("confirmed %v, want the conflict", got)
	}

	// A third holder: unconfirmed until checked again.
	c.SetClaim(claim("z", "12", pool("node-a")))
	c.Sync()
	snap := c.Get(pool("node-a"))
	if len(snap.Conflicts) != 0 || len(snap.Unconfirmed()) != 1 {
		t.Errorf("after a claim joined: confirmed %v, unconfirmed %v; want none and one", snap.Conflicts, snap.Unconfirmed())
	}

	// The conflict ends; a confirmation arriving late does not bring it
	// back when it returns.
	late := c.Get(pool("node-a")).Suspected[0]
	c.DeleteClaim(claim("y", "13"))
	c.DeleteClaim(claim("z", "14"))
	c.Sync()
	c.Confirm(pool("node-a"), late)
	c.SetClaim(claim("y2", "15", pool("node-a")))
	c.Sync()
	if got := c.Get(pool("node-a")).Conflicts; len(got) != 0 {
		t.Errorf("a conflict back again is confirmed without a check: %v", got)
	}
}

// OnNode finds a node-local pool's snapshot by its node, follows the pool
// when its slice moves to another node, and forgets it when it is gone.
func TestOnNode(t *testing.T) {
	c := New(Options{})
	onNode := func(node string) []string {
		var pools []string
		for _, s := range c.OnNode(node) {
			pools = append(pools, s.Pool)
		}
		return pools
	}
	local := slice("s1", "p1", "gpu-0")
	local.Spec.NodeName = ptr.To("node-1")
	c.SetSlice(local)
	c.SetSlice(slice("fabric", "fabric", "link-0")) // tied to no node
	c.Sync()
	if got := onNode("node-1"); len(got) != 1 || got[0] != "p1" {
		t.Fatalf("OnNode(node-1) = %v, want [p1]", got)
	}
	if got := onNode(""); len(got) != 0 {
		t.Errorf("OnNode(\"\") = %v: pools tied to no node are not on a node", got)
	}

	moved := local.DeepCopy()
	moved.Spec.NodeName = ptr.To("node-2")
	c.SetSlice(moved)
	c.Sync()
	if got := onNode("node-1"); len(got) != 0 {
		t.Errorf("OnNode(node-1) = %v after the pool moved to node-2", got)
	}
	if got := onNode("node-2"); len(got) != 1 {
		t.Errorf("OnNode(node-2) = %v, want [p1]", got)
	}

	c.DeleteSlice(moved)
	c.Sync()
	if got := onNode("node-2"); len(got) != 0 {
		t.Errorf("OnNode(node-2) = %v after the pool's slice was deleted", got)
	}
}

// The claims a namespace holds allocations with, as the scheduler sees
// them, follow every step of an allocation's life: in flight, written,
// deallocated, deleted.
func TestAllocatedIn(t *testing.T) {
	c := New(Options{})
	names := func() []string {
		var out []string
		for _, claim := range c.AllocatedIn("ns") {
			out = append(out, claim.Name+"@"+claim.ResourceVersion)
		}
		slices.Sort(out)
		return out
	}
	c.SetClaim(claim("x", "10"))
	c.SetClaim(claim("y", "10", pool("node-a")))
	if got := names(); !gocmp.Equal(got, []string{"y@10"}) {
		t.Errorf("allocated %v, want y only", got)
	}
	c.PendingAllocation(claim("x", "10", pool("node-a")))
	if got := names(); !gocmp.Equal(got, []string{"x@10", "y@10"}) {
		t.Errorf("with x in flight: %v, want x and y", got)
	}
	c.Assumed(claim("x", "11", pool("node-a")))
	c.PendingAllocationRemoved("x")
	if got := names(); !gocmp.Equal(got, []string{"x@11", "y@10"}) {
		t.Errorf("with x written: %v, want x's written version and y", got)
	}
	var released []string
	c.OnReleased(func(namespace string) { released = append(released, namespace) })
	c.SetClaim(claim("x", "11", pool("node-a"))) // the informer catches up: nothing released
	c.SetClaim(claim("y", "11"))
	c.DeleteClaim(claim("x", "11"))
	if !gocmp.Equal(released, []string{"ns", "ns"}) {
		t.Errorf("released %v, want ns twice: y deallocated, x deleted", released)
	}
	if got := names(); len(got) != 0 {
		t.Errorf("after deallocation and deletion: %v, want none", got)
	}
	if got := c.AllocatedIn("other"); len(got) != 0 {
		t.Errorf("another namespace: %v", got)
	}
	if sizes := c.Sizes(); sizes["poolcache_namespaces"] != 0 || sizes["poolcache_claim_namespaces"] != 0 {
		t.Errorf("sizes %v: the namespace index kept entries", sizes)
	}
}

func TestDevice(t *testing.T) {
	c := New(Options{})
	c.SetSlice(slice("a", "node-a", "gpu-0", "gpu-1"))
	newer := slice("a2", "node-a", "gpu-1")
	newer.Spec.Pool.Generation = 2
	newer.Spec.Devices[0].ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "s"}}
	c.SetSlice(newer)
	if d := c.Device(structured.MakeDeviceID(driver, "node-a", "gpu-1")); d == nil || len(d.ConsumesCounters) != 1 {
		t.Errorf("gpu-1: %+v, want the newest generation's", d)
	}
	if d := c.Device(structured.MakeDeviceID(driver, "node-a", "gpu-9")); d != nil {
		t.Errorf("an unknown device: %+v", d)
	}
}
