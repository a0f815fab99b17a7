package drausage

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const testDriver = "gpu.example.com"

func slice(name, pool string, generation, count int64, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   testDriver,
			Pool:     resourceapi.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: count},
			NodeName: ptr.To(pool),
			Devices:  devices,
		},
	}
}

func dev(name string) resourceapi.Device { return resourceapi.Device{Name: name} }

func devs(names ...string) []resourceapi.Device {
	out := make([]resourceapi.Device, len(names))
	for i, n := range names {
		out[i] = dev(n)
	}
	return out
}

type res = resourceapi.DeviceRequestAllocationResult

func onDevice(pool, device string) res {
	return res{Request: "gpu", Driver: testDriver, Pool: pool, Device: device}
}

func allocatedClaim(name string, results ...res) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
}

func admin(r res) res            { r.AdminAccess = ptr.To(true); return r }
func share(r res, id string) res { r.ShareID = ptr.To(types.UID(id)); return r }
func consume(r res, q string) res {
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}
	return r
}
func states(p PoolUsage) map[string]string {
	out := map[string]string{}
	for _, d := range p.Devices {
		out[d.Name] = string(d.State)
		if d.Reason != "" {
			out[d.Name] += " (" + string(d.Reason) + ")"
		}
	}
	return out
}

func kinds(p PoolUsage) []ValidationKind {
	var out []ValidationKind
	for _, e := range p.ValidationErrors {
		out = append(out, e.Kind)
	}
	return out
}

func TestComputePoolUsage(t *testing.T) {
	shared := dev("shared")
	shared.AllowMultipleAllocations = ptr.To(true)
	shared.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("8Gi")}}
	tainted := dev("tainted")
	tainted.Taints = []resourceapi.DeviceTaint{{Key: "broken", Value: "fan", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	prefer := dev("prefer-not")
	prefer.Taints = []resourceapi.DeviceTaint{{Key: "slow", Effect: resourceapi.DeviceTaintEffectNone}}

	// Partitionable: one counter set of 4 memory slices; "whole" needs 4,
	// each "half-*" needs 2.
	counters := slice("node-1-counters", "node-1", 1, 2)
	counters.Spec.Devices = nil
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"mem": {Value: resource.MustParse("4")}}}}
	partition := func(name, amount string) resourceapi.Device {
		d := dev(name)
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"mem": {Value: resource.MustParse(amount)}}}}
		return d
	}
	partitions := slice("node-1-devices", "node-1", 1, 2, partition("whole", "4"), partition("half-a", "2"), partition("half-b", "2"))

	tests := map[string]struct {
		slices     []*resourceapi.ResourceSlice
		claims     []*resourceapi.ResourceClaim
		opts       Options
		wantStates map[string]string
		wantSum    Summary
		wantErrs   []ValidationKind
		// wantConflicts are Conflict.Key values.
		wantConflicts []string
		complete      bool
		valid         bool
	}{
		"free pool": {
			slices:     []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0", "gpu-1")...)},
			wantStates: map[string]string{"gpu-0": "Available", "gpu-1": "Available"},
			wantSum:    Summary{Total: 2, Available: 2},
			complete:   true, valid: true,
		},
		"allocated device, claims for other pools ignored": {
			slices: []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0", "gpu-1")...)},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("a", onDevice("node-1", "gpu-0")),
				allocatedClaim("elsewhere", onDevice("node-2", "gpu-1")),
				{ObjectMeta: metav1.ObjectMeta{Name: "pending"}},
			},
			wantStates: map[string]string{"gpu-0": "Allocated", "gpu-1": "Available"},
			wantSum:    Summary{Total: 2, Allocated: 1, Available: 1},
			complete:   true, valid: true,
		},
		"admin access never counts": {
			slices: []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0", "gpu-1")...)},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("ordinary", onDevice("node-1", "gpu-0")),
				allocatedClaim("monitor-0", admin(onDevice("node-1", "gpu-0"))),
				allocatedClaim("monitor-1", admin(onDevice("node-1", "gpu-1"))),
			},
			wantStates: map[string]string{"gpu-0": "Allocated", "gpu-1": "Available"},
			wantSum:    Summary{Total: 2, Allocated: 1, Available: 1},
			complete:   true, valid: true,
		},
		"only the highest generation counts": {
			slices: []*resourceapi.ResourceSlice{
				slice("old", "node-1", 1, 1, devs("gpu-0", "gpu-1", "gpu-2")...),
				slice("new", "node-1", 2, 1, devs("gpu-0")...),
			},
			wantStates: map[string]string{"gpu-0": "Available"},
			wantSum:    Summary{Total: 1, Available: 1},
			wantErrs:   []ValidationKind{MixedGenerations},
			complete:   true, valid: false,
		},
		"several slices aggregate": {
			slices: []*resourceapi.ResourceSlice{
				slice("s-0", "node-1", 1, 2, devs("gpu-0")...),
				slice("s-1", "node-1", 1, 2, devs("gpu-1")...),
			},
			wantStates: map[string]string{"gpu-0": "Available", "gpu-1": "Available"},
			wantSum:    Summary{Total: 2, Available: 2},
			complete:   true, valid: true,
		},
		"missing slice: incomplete, still valid": {
			slices:     []*resourceapi.ResourceSlice{slice("s-0", "node-1", 1, 3, devs("gpu-0")...)},
			wantStates: map[string]string{"gpu-0": "Available"},
			wantSum:    Summary{Total: 1, Available: 1},
			wantErrs:   []ValidationKind{MissingSlices},
			complete:   false, valid: true,
		},
		"duplicate device names": {
			slices: []*resourceapi.ResourceSlice{
				slice("s-0", "node-1", 1, 2, devs("gpu-0", "gpu-1")...),
				slice("s-1", "node-1", 1, 2, devs("gpu-1")...),
			},
			wantStates: map[string]string{"gpu-0": "Available", "gpu-1": "Available"},
			wantSum:    Summary{Total: 2, Available: 2},
			wantErrs:   []ValidationKind{DuplicateDevice},
			complete:   true, valid: false,
		},
		"taints: NoSchedule on a free device; None is no taint; an allocated tainted device stays allocated": {
			slices: []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, tainted, prefer, dev("gpu-0"), dev("ruled"), dev("ruled-busy"))},
			claims: []*resourceapi.ResourceClaim{allocatedClaim("a", onDevice("node-1", "ruled-busy"))},
			opts: Options{DeviceTaintRules: []*resourceapi.DeviceTaintRule{
				{Spec: resourceapi.DeviceTaintRuleSpec{
					DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(testDriver), Pool: ptr.To("node-1"), Device: ptr.To("ruled")},
					Taint:          resourceapi.DeviceTaint{Key: "maintenance", Effect: resourceapi.DeviceTaintEffectNoExecute},
				}},
				{Spec: resourceapi.DeviceTaintRuleSpec{
					DeviceSelector: &resourceapi.DeviceTaintSelector{Device: ptr.To("ruled-busy")},
					Taint:          resourceapi.DeviceTaint{Key: "maintenance", Effect: resourceapi.DeviceTaintEffectNoExecute},
				}},
				{Spec: resourceapi.DeviceTaintRuleSpec{
					DeviceSelector: &resourceapi.DeviceTaintSelector{Pool: ptr.To("other-pool")},
					Taint:          resourceapi.DeviceTaint{Key: "elsewhere", Effect: resourceapi.DeviceTaintEffectNoSchedule},
				}},
			}},
			wantStates: map[string]string{
				"tainted": "Unavailable (Tainted)", "prefer-not": "Available", "gpu-0": "Available",
				"ruled": "Unavailable (Tainted)", "ruled-busy": "Allocated",
			},
			wantSum:  Summary{Total: 5, Allocated: 1, Unavailable: 2, Available: 2},
			complete: true, valid: true,
		},
		"consumable capacity: partially, then fully allocated": {
			slices: []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, shared, func() resourceapi.Device { d := shared; d.Name = "shared-full"; return d }())},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("a", consume(share(onDevice("node-1", "shared"), "1"), "2Gi")),
				allocatedClaim("b", consume(share(onDevice("node-1", "shared"), "2"), "2Gi")),
				allocatedClaim("c", consume(share(onDevice("node-1", "shared-full"), "3"), "6Gi")),
				allocatedClaim("d", consume(share(onDevice("node-1", "shared-full"), "4"), "2Gi")),
			},
			wantStates: map[string]string{"shared": "PartiallyAllocated", "shared-full": "Allocated"},
			wantSum:    Summary{Total: 2, Allocated: 2, PartiallyAllocated: 1},
			complete:   true, valid: true,
		},
		"partitionable: counters exhausted by other allocations": {
			slices:     []*resourceapi.ResourceSlice{counters, partitions},
			claims:     []*resourceapi.ResourceClaim{allocatedClaim("a", onDevice("node-1", "half-a"))},
			wantStates: map[string]string{"whole": "Unavailable (CountersExhausted)", "half-a": "Allocated", "half-b": "Available"},
			wantSum:    Summary{Total: 3, Allocated: 1, Unavailable: 1, Available: 1},
			complete:   true, valid: true,
		},
		"conflict: one device allocated to two claims": {
			slices: []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0")...)},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("first", onDevice("node-1", "gpu-0")),
				allocatedClaim("second", onDevice("node-1", "gpu-0")),
			},
			wantStates:    map[string]string{"gpu-0": "Allocated"},
			wantSum:       Summary{Total: 1, Allocated: 1},
			wantConflicts: []string{"OverAllocatedDevice/gpu-0"},
			complete:      true, valid: false,
		},
		"conflict: shares consume more than the capacity": {
			slices: []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, shared)},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("a", consume(share(onDevice("node-1", "shared"), "1"), "6Gi")),
				allocatedClaim("b", consume(share(onDevice("node-1", "shared"), "2"), "6Gi")),
			},
			wantStates:    map[string]string{"shared": "Allocated"},
			wantSum:       Summary{Total: 1, Allocated: 1},
			wantConflicts: []string{"OverConsumedCapacity/shared"},
			complete:      true, valid: false,
		},
		"conflict: two partitions that together exceed the shared counter": {
			slices: []*resourceapi.ResourceSlice{counters, partitions},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("a", onDevice("node-1", "whole")),
				allocatedClaim("b", onDevice("node-1", "half-a")),
			},
			wantStates:    map[string]string{"whole": "Allocated", "half-a": "Allocated", "half-b": "Unavailable (CountersExhausted)"},
			wantSum:       Summary{Total: 3, Allocated: 2, Unavailable: 1},
			wantConflicts: []string{"OverConsumedCounter/gpu-0/mem"},
			complete:      true, valid: false,
		},
		"a device allowing multiple allocations consumes its counters once, however many shares": {
			slices: []*resourceapi.ResourceSlice{counters, slice("node-1-devices", "node-1", 1, 2, func() resourceapi.Device {
				d := partition("whole", "4")
				d.AllowMultipleAllocations = ptr.To(true)
				return d
			}())},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("a", share(onDevice("node-1", "whole"), "1")),
				allocatedClaim("b", share(onDevice("node-1", "whole"), "2")),
			},
			wantStates: map[string]string{"whole": "PartiallyAllocated"},
			wantSum:    Summary{Total: 1, Allocated: 1, PartiallyAllocated: 1},
			complete:   true, valid: true,
		},
		"one claim per device of a counter set is no conflict, nor is consuming it exactly": {
			slices: []*resourceapi.ResourceSlice{counters, partitions},
			claims: []*resourceapi.ResourceClaim{
				allocatedClaim("a", onDevice("node-1", "half-a")),
				allocatedClaim("b", onDevice("node-1", "half-b")),
			},
			wantStates: map[string]string{"whole": "Unavailable (CountersExhausted)", "half-a": "Allocated", "half-b": "Allocated"},
			wantSum:    Summary{Total: 3, Allocated: 2, Unavailable: 1},
			complete:   true, valid: true,
		},
		"health Avoid: a free Unhealthy device is withheld, an allocated one stays allocated": {
			slices:     []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0", "gpu-1", "gpu-2")...)},
			claims:     []*resourceapi.ResourceClaim{allocatedClaim("a", onDevice("node-1", "gpu-1"))},
			opts:       Options{Health: unhealthy("gpu-0", "gpu-1"), WithholdUnhealthy: true},
			wantStates: map[string]string{"gpu-0": "Unavailable (Unhealthy)", "gpu-1": "Allocated", "gpu-2": "Available"},
			wantSum:    Summary{Total: 3, Allocated: 1, Unavailable: 1, Available: 1},
			complete:   true, valid: true,
		},
		"health Ignore: an Unhealthy device stays available": {
			slices:     []*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0", "gpu-1")...)},
			opts:       Options{Health: unhealthy("gpu-0")},
			wantStates: map[string]string{"gpu-0": "Available", "gpu-1": "Available"},
			wantSum:    Summary{Total: 2, Available: 2},
			complete:   true, valid: true,
		},
		"health Avoid: a withheld partition uses up its counters, as the allocator sees it": {
			slices:     []*resourceapi.ResourceSlice{counters, partitions},
			opts:       Options{Health: unhealthy("half-a"), WithholdUnhealthy: true},
			wantStates: map[string]string{"whole": "Unavailable (CountersExhausted)", "half-a": "Unavailable (Unhealthy)", "half-b": "Available"},
			wantSum:    Summary{Total: 3, Unavailable: 2, Available: 1},
			complete:   true, valid: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pools := ComputePoolUsage(tc.slices, tc.claims, tc.opts)
			if len(pools) != 1 {
				t.Fatalf("want 1 pool, got %d", len(pools))
			}
			p := pools[0]
			if diff := cmp.Diff(tc.wantStates, states(p)); diff != "" {
				t.Errorf("device states (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSum, p.Summary); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantErrs, kinds(p)); diff != "" {
				t.Errorf("validation errors (-want +got):\n%s\n%v", diff, p.ValidationErrors)
			}
			var conflicts []string
			for _, c := range p.Conflicts {
				conflicts = append(conflicts, c.Key())
			}
			if diff := cmp.Diff(tc.wantConflicts, conflicts); diff != "" {
				t.Errorf("conflicts (-want +got):\n%s\n%+v", diff, p.Conflicts)
			}
			if p.Complete() != tc.complete || p.Valid() != tc.valid {
				t.Errorf("complete=%v valid=%v, want %v %v", p.Complete(), p.Valid(), tc.complete, tc.valid)
			}
		})
	}
}

// unhealthy reports the named devices Unhealthy and every other one Healthy.
func unhealthy(names ...string) func(PoolID, string) DeviceHealth {
	return func(_ PoolID, device string) DeviceHealth {
		if slices.Contains(names, device) {
			return DeviceHealth{Status: v1.ResourceHealthStatusUnhealthy, Detail: "reported by pod default/p: fan"}
		}
		return DeviceHealth{Status: v1.ResourceHealthStatusHealthy}
	}
}

func TestHealthIsReportedForEveryDevice(t *testing.T) {
	p := ComputePoolUsage(
		[]*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0", "gpu-1")...)},
		[]*resourceapi.ResourceClaim{allocatedClaim("a", onDevice("node-1", "gpu-0"))},
		Options{Health: unhealthy("gpu-0", "gpu-1"), WithholdUnhealthy: true})[0]
	for _, d := range p.Devices {
		if d.Health.Status != v1.ResourceHealthStatusUnhealthy || d.Health.Detail == "" {
			t.Errorf("device %s: health %+v, want Unhealthy with its detail", d.Name, d.Health)
		}
	}
	if got := p.Devices[1]; got.Reason != ReasonUnhealthy || got.Message != "reported by pod default/p: fan" {
		t.Errorf("withheld device: reason %q, message %q; want Unhealthy, with who reported it", got.Reason, got.Message)
	}
}

func TestConflictMessageNamesTheDeviceNotTheClaims(t *testing.T) {
	pools := ComputePoolUsage(
		[]*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, devs("gpu-0")...)},
		[]*resourceapi.ResourceClaim{allocatedClaim("secret-a", onDevice("node-1", "gpu-0")), allocatedClaim("secret-b", onDevice("node-1", "gpu-0"))},
		Options{})
	c := pools[0].Conflicts[0]
	if !strings.Contains(c.Message, "gpu.example.com/node-1/gpu-0") || strings.Contains(c.Message, "secret") {
		t.Errorf("conflict message must name the device and no claim: %q", c.Message)
	}
	// The claims are kept apart from the message, for re-checking.
	if len(c.Claims) != 2 || c.Claims[0].Name != "secret-a" || c.Claims[1].Name != "secret-b" {
		t.Errorf("conflict claims %v, want secret-a and secret-b", c.Claims)
	}
}

// Conflicts are never truncated: a pool with many over-allocated devices
// reports each, however many slice problems come first.
func TestEveryConflictIsCounted(t *testing.T) {
	var slices []*resourceapi.ResourceSlice
	names := make([]string, 30)
	for i := range names {
		names[i] = "gpu-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	slices = append(slices, slice("a", "node-1", 1, 1, devs(names...)...))
	for i := range 15 {
		slices = append(slices, slice("dup-"+string(rune('a'+i)), "node-1", 1, 1, devs(names[0])...))
	}
	var claims []*resourceapi.ResourceClaim
	for _, n := range names {
		claims = append(claims, allocatedClaim(n+"-1", onDevice("node-1", n)), allocatedClaim(n+"-2", onDevice("node-1", n)))
	}
	p := ComputePoolUsage(slices, claims, Options{})[0]
	if got := p.ConflictCounts()[OverAllocatedDevice]; got != len(names) {
		t.Errorf("counted %d over-allocated devices, want %d", got, len(names))
	}
	if len(p.ValidationErrors) != MaxValidationErrors || p.TruncatedErrorCount == 0 {
		t.Errorf("kept %d slice problems, %d more counted; want the cap and some counted", len(p.ValidationErrors), p.TruncatedErrorCount)
	}
}

func TestValidationErrorsAreTruncated(t *testing.T) {
	var slices []*resourceapi.ResourceSlice
	for i := range 15 {
		slices = append(slices, slice(string(rune('a'+i)), "node-1", 1, 15, devs("same")...))
	}
	p := ComputePoolUsage(slices, nil, Options{})[0]
	if len(p.ValidationErrors) != MaxValidationErrors || p.TruncatedErrorCount != 4 {
		t.Errorf("kept %d errors and counted %d more, want %d and 4", len(p.ValidationErrors), p.TruncatedErrorCount, MaxValidationErrors)
	}
	if p.Valid() {
		t.Error("a pool with duplicate devices is not valid")
	}
}

func TestPoolsNotTiedToANode(t *testing.T) {
	s0 := slice("fabric-0", "fabric", 1, 2, devs("nic-0")...)
	s1 := slice("fabric-1", "fabric", 1, 2, devs("nic-1")...)
	s0.Spec.NodeName, s1.Spec.NodeName = nil, nil
	s0.Spec.AllNodes, s1.Spec.AllNodes = ptr.To(true), ptr.To(true)
	other := slice("node-2", "node-2", 1, 1, devs("gpu-0")...)
	pools := ComputePoolUsage([]*resourceapi.ResourceSlice{other, s1, s0}, nil, Options{})
	got := []string{}
	for _, p := range pools {
		got = append(got, p.String()+"@"+p.NodeName)
	}
	if diff := cmp.Diff([]string{"gpu.example.com/fabric@", "gpu.example.com/node-2@node-2"}, got); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
}

// A device that allows multiple allocations says how much of each capacity
// its shares consume; other devices say nothing.
func TestCapacityUseOfSharedDevices(t *testing.T) {
	shared := dev("shared")
	shared.AllowMultipleAllocations = ptr.To(true)
	shared.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("16Gi")}, "cores": {Value: resource.MustParse("8")}}
	plain := dev("plain")
	usage := ComputePool(PoolID{Driver: "gpu.example.com", Pool: "node-1"},
		[]*resourceapi.ResourceSlice{slice("s", "node-1", 1, 1, shared, plain)},
		[]*resourceapi.ResourceClaim{
			allocatedClaim("a", consume(share(onDevice("node-1", "shared"), "1"), "6Gi")),
			allocatedClaim("b", consume(share(onDevice("node-1", "shared"), "2"), "6Gi")),
			allocatedClaim("c", onDevice("node-1", "plain")),
		}, Options{})
	for _, d := range usage.Devices {
		switch d.Name {
		case "shared":
			if len(d.Capacity) != 2 || d.Capacity[0].Name != "cores" || d.Capacity[1].Name != "memory" ||
				d.Capacity[1].Used.Cmp(resource.MustParse("12Gi")) != 0 || d.Capacity[1].Total.Cmp(resource.MustParse("16Gi")) != 0 || !d.Capacity[0].Used.IsZero() {
				t.Errorf("shared device capacity %+v, want cores 0/8 and memory 12Gi/16Gi", d.Capacity)
			}
		case "plain":
			if d.Capacity != nil {
				t.Errorf("plain device capacity %+v, want none", d.Capacity)
			}
		}
	}
}

// Each counter set shows what its allocated partitions consume; whole
// devices free are the untouched sets and the free devices without
// counters.
func TestPhysicalDevices(t *testing.T) {
	counters := slice("node-1-counters", "node-1", 1, 2)
	counters.Spec.Devices = nil
	counters.Spec.SharedCounters = []resourceapi.CounterSet{
		{Name: "gpu-1", Counters: map[string]resourceapi.Counter{"mem": {Value: resource.MustParse("4")}}},
		{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"mem": {Value: resource.MustParse("4")}}},
	}
	partition := func(name, set, amount string) resourceapi.Device {
		d := dev(name)
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{"mem": {Value: resource.MustParse(amount)}}}}
		return d
	}
	devices := slice("node-1-devices", "node-1", 1, 2,
		partition("gpu-0-whole", "gpu-0", "4"), partition("gpu-0-half-a", "gpu-0", "2"), partition("gpu-0-half-b", "gpu-0", "2"),
		partition("gpu-1-whole", "gpu-1", "4"), partition("gpu-1-half-a", "gpu-1", "2"), partition("gpu-1-half-b", "gpu-1", "2"),
		dev("nic-0"), dev("nic-1"))
	claims := []*resourceapi.ResourceClaim{
		allocatedClaim("a", onDevice("node-1", "gpu-0-half-b")),
		allocatedClaim("b", onDevice("node-1", "nic-1")),
	}
	pools := ComputePoolUsage([]*resourceapi.ResourceSlice{counters, devices}, claims, Options{})
	if len(pools) != 1 {
		t.Fatalf("want 1 pool, got %d", len(pools))
	}
	type shown struct {
		Name, Consumed string
		Partitions     []string
		Untouched      bool
	}
	var got []shown
	for _, pd := range pools[0].PhysicalDevices {
		c := pd.Counters[0]
		got = append(got, shown{pd.Name, fmt.Sprintf("%s %s/%s", c.Name, c.Used.String(), c.Total.String()), pd.Partitions, pd.Untouched()})
	}
	want := []shown{
		{"gpu-0", "mem 2/4", []string{"gpu-0-half-b"}, false},
		{"gpu-1", "mem 0/4", nil, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("physical devices (-want +got):\n%s", diff)
	}
	// gpu-1, untouched, and nic-0; not gpu-0 (split) nor nic-1 (allocated).
	if got := pools[0].WholeDevicesFree; got != 2 {
		t.Errorf("WholeDevicesFree = %d, want 2", got)
	}

	// With gpu-1's whole device tainted, gpu-1 is untouched but no pod can
	// have it whole.
	devices.Spec.Devices[3].Taints = []resourceapi.DeviceTaint{{Key: "broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	pools = ComputePoolUsage([]*resourceapi.ResourceSlice{counters, devices}, claims, Options{})
	if got := pools[0].WholeDevicesFree; got != 1 {
		t.Errorf("with gpu-1-whole tainted, WholeDevicesFree = %d, want 1 (nic-0)", got)
	}
	if !pools[0].PhysicalDevices[1].Untouched() {
		t.Error("gpu-1 is not untouched with its whole device tainted")
	}
}
