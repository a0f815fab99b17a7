package devicechoice

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/slicememo"
)

const driver, pool = "gpu.example.com", "node-1"

func id(device string) structured.DeviceID { return structured.MakeDeviceID(driver, pool, device) }

func inUse(devices ...string) func(structured.DeviceID) bool {
	set := sets.New[structured.DeviceID]()
	for _, d := range devices {
		set.Insert(id(d))
	}
	return set.Has
}

func names(slice *resourceapi.ResourceSlice) []string {
	var out []string
	for _, d := range slice.Spec.Devices {
		out = append(out, d.Name)
	}
	return out
}

// partitionable is the example driver's shape: per GPU a counter set of
// 40Gi, a full device taking all of it and four partitions of 10Gi.
func partitionable(gpus int) []*resourceapi.ResourceSlice {
	counters := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "counters"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: pool}}}
	devices := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "devices"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: pool}}}
	consume := func(set, q string) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(q)}}}}
	}
	for g := range gpus {
		set := fmt.Sprintf("gpu-%d-counters", g)
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourceapi.CounterSet{Name: set, Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("40Gi")}}})
		devices.Spec.Devices = append(devices.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d-full", g), ConsumesCounters: consume(set, "40Gi")})
		for p := range 4 {
			devices.Spec.Devices = append(devices.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d-partition-%d", g, p), ConsumesCounters: consume(set, "10Gi")})
		}
	}
	return []*resourceapi.ResourceSlice{counters, devices}
}

// A partition goes to the physical GPU that is already split, the fullest
// first, not to the first whole GPU in the driver's order.
func TestPartitionsPackOntoSplitDevices(t *testing.T) {
	in := partitionable(3)
	ordered := Order(in, Options{InUse: inUse("gpu-1-partition-0", "gpu-2-partition-0", "gpu-2-partition-1")})
	got := names(ordered[1])
	want := []string{
		// gpu-2: half used, first; then gpu-1: a quarter.
		"gpu-2-full", "gpu-2-partition-0", "gpu-2-partition-1", "gpu-2-partition-2", "gpu-2-partition-3",
		"gpu-1-full", "gpu-1-partition-0", "gpu-1-partition-1", "gpu-1-partition-2", "gpu-1-partition-3",
		"gpu-0-full", "gpu-0-partition-0", "gpu-0-partition-1", "gpu-0-partition-2", "gpu-0-partition-3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("order %v\nwant  %v", got, want)
	}
	if ordered[0] != in[0] {
		t.Error("the counters slice, which has no devices, was copied")
	}
	if names(in[1])[0] != "gpu-0-full" {
		t.Error("the input slice was reordered in place")
	}
}

// A used-up GPU's devices go last; untouched ones keep the driver's order.
func TestUsedUpDevicesGoLast(t *testing.T) {
	in := partitionable(2)
	ordered := Order(in, Options{InUse: inUse("gpu-0-full")})
	if got := names(ordered[1])[0]; got != "gpu-1-full" {
		t.Errorf("first device %s, want gpu-1-full (gpu-0 is used up)", got)
	}
	if same := Order(in, Options{}); same[1] != in[1] {
		t.Error("an untouched pool was copied: nothing to reorder")
	}
}

// Devices are grouped by PCIe root, the root that best fits the pod's
// count first: the fewest free devices that still hold it.
func TestTopologyGroupsBestFit(t *testing.T) {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: pool}}}
	// The driver interleaves the roots.
	for i := range 8 {
		root := []string{"pci-a", "pci-b"}[i%2]
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(root)}}})
	}
	used := inUse("gpu-0", "gpu-2") // pci-a: 2 free, pci-b: 4 free
	firstFree := func(ordered []*resourceapi.ResourceSlice, n int) []string {
		var out []string
		for _, d := range ordered[0].Spec.Devices {
			if len(out) < n && !used(id(d.Name)) {
				out = append(out, d.Name)
			}
		}
		return out
	}
	if got := firstFree(Order([]*resourceapi.ResourceSlice{slice}, Options{InUse: used, Want: 2}), 2); !slices.Equal(got, []string{"gpu-4", "gpu-6"}) {
		t.Errorf("2 GPUs: first-fit takes %v, want gpu-4 and gpu-6 (pci-a, exactly 2 free)", got)
	}
	if got := firstFree(Order([]*resourceapi.ResourceSlice{slice}, Options{InUse: used, Want: 3}), 3); !slices.Equal(got, []string{"gpu-1", "gpu-3", "gpu-5"}) {
		t.Errorf("3 GPUs: first-fit takes %v, want three of pci-b", got)
	}
}

// Ordering only: every device is still there, once, whatever the state.
func TestNothingIsExcluded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for seed := range 200 {
		in := partitionable(1 + rng.IntN(4))
		var used []string
		for _, d := range in[1].Spec.Devices {
			if rng.IntN(3) == 0 {
				used = append(used, d.Name)
			}
		}
		out := Order(in, Options{InUse: inUse(used...), Want: rng.IntN(4)})
		got, want := names(out[1]), names(in[1])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: devices %v, want %v", seed, got, want)
		}
	}
}

// A lister may still return a pool's older generation: it passes through,
// and the newest is ordered from its own counters alone.
func TestOrderPoolsOrdersTheNewestGeneration(t *testing.T) {
	old := partitionable(2)
	for _, s := range old {
		s.Spec.Pool.Generation = 1
	}
	current := partitionable(2)
	for _, s := range current {
		s.Spec.Pool.Generation = 2
	}
	all := append(append([]*resourceapi.ResourceSlice{}, old...), current...)
	out := OrderPools(all, Options{InUse: inUse("gpu-1-partition-0")})
	if out[1] != old[1] {
		t.Error("the older generation's devices were reordered")
	}
	if got := names(out[3])[0]; got != "gpu-1-full" {
		t.Errorf("the newest generation starts with %s, want gpu-1-full (gpu-1 is split)", got)
	}
}

// With a memo shared across cycles, a cluster of plain devices is returned
// as it is, and once a partitionable slice joins it, that slice is ordered:
// the memo remembers slices, not the cluster's answer.
func TestOrderPoolsWithAMemoSeesNewSlices(t *testing.T) {
	memo := &slicememo.Memo[bool]{}
	plain := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: "plain"}, Devices: []resourceapi.Device{{Name: "gpu-0"}}}}
	opts := Options{InUse: inUse("gpu-1-partition-0"), Orderable: memo}
	for range 3 {
		if out := OrderPools([]*resourceapi.ResourceSlice{plain}, opts); out[0] != plain {
			t.Fatal("a plain slice was copied")
		}
	}
	out := OrderPools(append([]*resourceapi.ResourceSlice{plain}, partitionable(2)...), opts)
	if got := names(out[2])[0]; got != "gpu-1-full" {
		t.Errorf("the partitionable pool starts with %s, want gpu-1-full (gpu-1 is split)", got)
	}
}
