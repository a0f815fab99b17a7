package adminaccess

import (
	"context"
	"testing"

	"github.com/drascope/drascope/internal/dracases"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"
)

// The upstream allocator itself, as the scheduler builds it in PreFilter
// (1.37 defaults: partitionable devices, consumable capacity, admin access,
// device taints), over one node's partitionable GPU of 80Gi: "whole" uses
// all of it, "half-a" and "half-b" 40Gi each; "whole" is allocated to a
// workload.

type classes = dracases.ClassList

const testDriver = "gpu.example.com"

func partitionableNode() []*resourceapi.ResourceSlice {
	spec := resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 2}
	partition := func(name, memory string) resourceapi.Device {
		return resourceapi.Device{
			Name:       name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"partition": {StringValue: ptr.To(name)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}},
			}},
		}
	}
	return []*resourceapi.ResourceSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "counters"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: testDriver, Pool: spec, NodeName: ptr.To("node-1"),
			SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "devices"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: testDriver, Pool: spec, NodeName: ptr.To("node-1"),
			Devices: []resourceapi.Device{partition("whole", "80Gi"), partition("half-a", "40Gi"), partition("half-b", "40Gi")},
		}},
	}
}

func claimFor(name, partition string, adminAccess bool) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpu", AdminAccess: ptr.To(adminAccess),
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, // the apiserver's defaults
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["` + testDriver + `"].partition == "` + partition + `"`,
				}}},
			},
		}}}},
	}
}

// allocate runs upstream's allocator for claims on node-1 with "whole"
// allocated, and returns the devices it picked, or nil.
func allocate(t *testing.T, slices []*resourceapi.ResourceSlice, claims ...*resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	return allocateWith(t, sets.New(structured.MakeDeviceID(testDriver, "node-1", "whole")), slices, claims...)
}

// allocateWith is allocate with other devices in use.
func allocateWith(t *testing.T, inUse sets.Set[structured.DeviceID], slices []*resourceapi.ResourceSlice, claims ...*resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	results, err := tryAllocate(t, inUse, slices, claims...)
	if err != nil {
		t.Fatal(err)
	}
	return results
}

// tryAllocate is allocateWith returning the allocator's error.
func tryAllocate(t *testing.T, inUse sets.Set[structured.DeviceID], slices []*resourceapi.ResourceSlice, claims ...*resourceapi.ResourceClaim) ([]resourceapi.DeviceRequestAllocationResult, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	// The features the scheduler runs with: 1.37's default gates.
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	allocated := structured.AllocatedState{
		AllocatedDevices:         inUse,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	gpu := classes{"gpu": {ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
		CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + testDriver + `"`},
	}}}}}
	allocator, err := structured.NewAllocator(ctx, dynamicresources.AllocatorFeatures(fts), allocated, gpu, slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	results, err := allocator.Allocate(context.Background(), node, claims)
	var out []resourceapi.DeviceRequestAllocationResult
	for _, r := range results {
		out = append(out, r.Devices.Results...)
	}
	return out, err
}

// The upstream bug, shown with upstream's own allocator: an admin-access
// monitor is refused the partition a workload fully uses, and two monitors
// in one pod cannot watch overlapping partitions. When this test fails
// because upstream allocates, #140729 is fixed: delete the workaround.
func TestUpstreamRefusesAdminAccessForCounters(t *testing.T) {
	// The set-up works: with the GPU free, upstream allocates the monitor.
	if got := allocateWith(t, sets.New[structured.DeviceID](), partitionableNode(), claimFor("monitor", "whole", true)); len(got) != 1 {
		t.Fatalf("upstream did not allocate a monitor on a free GPU: %v", got)
	}
	if got := allocate(t, partitionableNode(), claimFor("monitor", "whole", true)); got != nil {
		t.Errorf("upstream allocated %v on a fully used GPU; if %s is fixed, delete counters.go", got, UpstreamIssue)
	}
	// On a free GPU, two monitors of one pod on overlapping partitions.
	if got := allocateWith(t, sets.New[structured.DeviceID](), partitionableNode(), claimFor("monitor-whole", "whole", true), claimFor("monitor-half", "half-a", true)); got != nil {
		t.Errorf("upstream allocated overlapping monitors %v; if %s is fixed, delete counters.go", got, UpstreamIssue)
	}
}

func TestAdminAccessWithoutCounters(t *testing.T) {
	slices := partitionableNode()
	stripped := WithZeroCounterConsumption(slices)

	// The monitor gets the fully used GPU, with admin access.
	got := allocate(t, stripped, claimFor("monitor", "whole", true))
	if len(got) != 1 || got[0].Device != "whole" || !ptr.Deref(got[0].AdminAccess, false) {
		t.Errorf("monitor: %+v, want the whole GPU with admin access", got)
	}
	// Two monitors of one pod on overlapping partitions (80+40Gi of 80Gi).
	got = allocate(t, stripped, claimFor("monitor-whole", "whole", true), claimFor("monitor-half", "half-a", true))
	if len(got) != 2 {
		t.Errorf("two monitors: %+v, want both allocated", got)
	}

	// Nothing else changes: an unknown partition is still refused, and so
	// is a device a taint blocks.
	if got := allocate(t, stripped, claimFor("monitor", "quarter", true)); got != nil {
		t.Errorf("a selector matching nothing allocated %+v", got)
	}
	tainted := WithZeroCounterConsumption(partitionableNode())
	tainted[1].Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	if got := allocate(t, tainted, claimFor("monitor", "whole", true)); got != nil {
		t.Errorf("a NoSchedule-tainted device allocated to a claim without toleration: %+v", got)
	}

	// A pool upstream finds invalid (a device names a counter set that
	// does not exist) stays invalid.
	broken := partitionableNode()
	broken[1].Spec.Devices[0].ConsumesCounters[0].CounterSet = "gpu-9"
	_, upstreamErr := tryAllocate(t, sets.New[structured.DeviceID](), broken, claimFor("monitor", "whole", true))
	got, err := tryAllocate(t, sets.New[structured.DeviceID](), WithZeroCounterConsumption(broken), claimFor("monitor", "whole", true))
	if upstreamErr == nil || err == nil || err.Error() != upstreamErr.Error() || got != nil {
		t.Errorf("an invalid pool: %+v, %v; want upstream's refusal %v", got, err, upstreamErr)
	}

	// The informer's slices are not modified; slices without counter
	// consumption are shared, not copied.
	if q := slices[1].Spec.Devices[0].ConsumesCounters[0].Counters["memory"].Value; q.String() != "80Gi" {
		t.Errorf("WithZeroCounterConsumption modified the listed slice: %s", q.String())
	}
	if q := stripped[1].Spec.Devices[0].ConsumesCounters[0].Counters["memory"].Value; !q.IsZero() {
		t.Errorf("consumption %s, want zero", q.String())
	}
	if stripped[0] != slices[0] || stripped[1] == slices[1] {
		t.Error("only the slice whose devices consume counters should be copied")
	}
}
