package dryrun_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/dryrun"
)

// The differential test: random clusters and claims (internal/dracases);
// victims' allocations freed and a nominated pod's taken. For every node,
// a dry run on the node's share must give the verdict of upstream's
// allocator over the whole cluster with the in-use set changed the same
// way: devices of the freed allocations are free, except admin-access
// results (which hold nothing) and withheld devices (in use for no claim);
// taken devices are in use.

// change is what one case frees and takes.
type change struct {
	freed []*resourceapi.AllocationResult
	taken *resourceapi.AllocationResult
	// inUse is the whole cluster's in-use set after the change.
	inUse sets.Set[structured.DeviceID]
}

func sorted(ids sets.Set[structured.DeviceID]) []structured.DeviceID {
	list := ids.UnsortedList()
	slices.SortFunc(list, func(a, b structured.DeviceID) int { return strings.Compare(a.String(), b.String()) })
	return list
}

func allocationOf(ids []structured.DeviceID, admin func() bool) *resourceapi.AllocationResult {
	allocation := &resourceapi.AllocationResult{}
	for _, id := range ids {
		allocation.Devices.Results = append(allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "req", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String(), AdminAccess: ptr.To(admin()),
		})
	}
	return allocation
}

func newChange(seed uint64, c dracases.Case) change {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	ch := change{inUse: c.InUse.Clone()}
	inUse := sorted(c.InUse)
	// One or two victims, each holding a random share of what is in use
	// (a withheld device included now and then: a claim may hold a device
	// that later became Unhealthy).
	for range 1 + r.IntN(2) {
		var ids []structured.DeviceID
		for _, id := range inUse {
			if r.IntN(3) == 0 {
				ids = append(ids, id)
			}
		}
		allocation := allocationOf(ids, func() bool { return r.IntN(8) == 0 })
		ch.freed = append(ch.freed, allocation)
		for _, result := range allocation.Devices.Results {
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if !*result.AdminAccess && !c.Withheld.Has(id) {
				ch.inUse.Delete(id)
			}
		}
	}
	// A nominated pod takes some of what is then free.
	if r.IntN(2) == 0 {
		var ids []structured.DeviceID
		for _, slice := range c.Slices {
			for _, d := range slice.Spec.Devices {
				id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name)
				if !ch.inUse.Has(id) && r.IntN(4) == 0 {
					ids = append(ids, id)
				}
			}
		}
		ch.taken = allocationOf(ids, func() bool { return false })
		ch.inUse.Insert(ids...)
	}
	return ch
}

// outcome counts what the cases exercised, so that a generator that stops
// producing interesting cases fails the test rather than passing it.
type outcome struct {
	cases, verdicts, accepted, freedToFit int
}

func check(t *testing.T, seed uint64, o *outcome) {
	t.Helper()
	ctx := context.Background()
	c := dracases.New(seed)
	ch := newChange(seed, c)
	o.cases++
	for setName, features := range dracases.FeatureSets {
		state := func(inUse sets.Set[structured.DeviceID]) structured.AllocatedState {
			return structured.AllocatedState{
				AllocatedDevices:         inUse,
				AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
				AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
			}
		}
		whole, err := structured.NewAllocator(ctx, features, state(ch.inUse), dracases.Classes, c.Slices, dracases.CEL)
		if err != nil {
			t.Fatalf("seed %d, features %s: building the allocator: %v", seed, setName, err)
		}
		before, err := structured.NewAllocator(ctx, features, state(c.InUse), dracases.Classes, c.Slices, dracases.CEL)
		if err != nil {
			t.Fatalf("seed %d, features %s: building the allocator: %v", seed, setName, err)
		}
		cycle := dryrun.NewCycle(dryrun.Allocating{Features: features, Classes: dracases.Classes, CEL: dracases.CEL}, state(c.InUse), c.Withheld, c.Slices)
		for _, node := range c.Nodes {
			results, err := whole.Allocate(ctx, node, c.Claims)
			want := err == nil && len(results) == len(c.Claims)

			n := cycle.Node(node)
			for _, allocation := range ch.freed {
				n.Free(allocation)
			}
			n.Take(ch.taken)
			results, err = n.Allocate(ctx, c.Claims)
			got := err == nil && results != nil
			o.verdicts++
			if got != want {
				t.Errorf("seed %d, features %s, %s: dry run accepts=%v, the allocator over the changed cluster accepts=%v (err %v)\nclaims: %s\nin use before: %v\nafter: %v",
					seed, setName, node.Name, got, want, err, dracases.DescribeClaims(c.Claims), sorted(c.InUse), sorted(ch.inUse))
			}
			if want {
				o.accepted++
				if results, err := before.Allocate(ctx, node, c.Claims); err != nil || len(results) != len(c.Claims) {
					o.freedToFit++
				}
			}
		}
	}
}

// TestDryRunAgreesWithTheAllocator runs 2000 seeded cases, each under
// every feature set.
func TestDryRunAgreesWithTheAllocator(t *testing.T) {
	var o outcome
	for seed := range uint64(2000) {
		check(t, seed, &o)
	}
	t.Logf("%d cases, %d node verdicts: %d accepted, %d of them only because devices were freed", o.cases, o.verdicts, o.accepted, o.freedToFit)
	if o.accepted < o.verdicts/20 || o.freedToFit < o.verdicts/40 {
		t.Errorf("the generator produced too few interesting cases: %+v", o)
	}
}

// FuzzDryRun explores more seeds: go test -fuzz FuzzDryRun ./pkg/dryrun
func FuzzDryRun(f *testing.F) {
	for _, seed := range []uint64{0, 7, 1 << 33} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		check(t, seed, &outcome{})
	})
}

// With consumable capacity, a result with a share ID holds a share of the
// device and its capacity, not the device: freeing it gives the capacity
// back, taking it uses it again.
func TestSharesOfConsumableCapacity(t *testing.T) {
	ctx := context.Background()
	features := dracases.FeatureSets["all"]
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-0-shared"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dracases.GPUDriver, Pool: resourceapi.ResourcePool{Name: "node-0", Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To("node-0"),
		Devices: []resourceapi.Device{{
			Name:                     "shared-0",
			AllowMultipleAllocations: ptr.To(true),
			Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		}},
	}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	id := structured.MakeDeviceID(dracases.GPUDriver, "node-0", "shared-0")
	share := func(uid string) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "req", Driver: dracases.GPUDriver, Pool: "node-0", Device: "shared-0", ShareID: ptr.To(types.UID(uid)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")},
		}}}}
	}
	// Two shares of 40Gi use the device's 80Gi.
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New(structured.MakeSharedDeviceID(id, ptr.To(types.UID("a"))), structured.MakeSharedDeviceID(id, ptr.To(types.UID("b")))),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for range 2 {
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")}))
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "wants-40Gi", UID: "uid"}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "shareable", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")}},
	}}}
	cycle := dryrun.NewCycle(dryrun.Allocating{Features: features, Classes: dracases.Classes, CEL: dracases.CEL}, state, sets.New[structured.DeviceID](), []*resourceapi.ResourceSlice{slice})
	n := cycle.Node(node)
	fits := func() bool {
		t.Helper()
		results, err := n.Allocate(ctx, []*resourceapi.ResourceClaim{claim})
		if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
			t.Fatalf("Allocate: %v", err)
		}
		return results != nil
	}
	if fits() {
		t.Fatalf("40Gi fit on a device whose 80Gi two shares use")
	}
	n.Free(share("a"))
	if !fits() {
		t.Errorf("with share a freed, 40Gi does not fit")
	}
	n.Take(share("c"))
	if fits() {
		t.Errorf("with share c taken, 40Gi still fits")
	}
	// The cycle is unchanged: a new share of the node starts from both
	// shares in use again.
	n = cycle.Node(node)
	if fits() {
		t.Errorf("freeing on one share of the node changed the cycle: 40Gi fits on a new share")
	}
	if n.ReachesNetworkPools() {
		t.Errorf("a node-local pool counted as network-attached")
	}
}
