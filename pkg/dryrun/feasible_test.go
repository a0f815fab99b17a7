package dryrun_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

var allFeatures = dracases.FeatureSets["all"]

// identicalGPUs is a node's pool of n GPUs that differ only by name: the
// allocator's worst case, where every assignment of devices to requests
// looks alike.
func identicalGPUs(nodeName string, n int) *resourceapi.ResourceSlice {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dracases.GPUDriver, NodeName: ptr.To(nodeName),
		Pool: resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
	}}
	for i := range n {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("a100")}}})
	}
	return slice
}

// oneEach is n claims of one device of the class each: n members of a gang,
// or one pod with n claims.
func oneEach(class string, n int) []*resourceapi.ResourceClaim {
	var claims []*resourceapi.ResourceClaim
	for i := range n {
		name := fmt.Sprintf("c%d", i)
		claims = append(claims, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}}},
		})
	}
	return claims
}

func emptyState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

type outcomes map[dryrun.Outcome]int

func (o outcomes) observe(outcome dryrun.Outcome) { o[outcome]++ }

func nodeNamed(name string) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

// Seventeen one-GPU claims on a node of sixteen identical GPUs: upstream's
// allocator would try every assignment before it fails; the dry run knows
// from the count and runs no search.
func TestOneMoreThanTheNodeHasIsNotSearched(t *testing.T) {
	seen := outcomes{}
	cycle := dryrun.NewCycle(dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL, Observe: seen.observe},
		emptyState(), nil, []*resourceapi.ResourceSlice{identicalGPUs("node-0", 16)})
	n := cycle.Node(nodeNamed("node-0"))
	if !n.MayFit(oneEach("gpu", 16)) {
		t.Fatal("sixteen claims of one GPU on sixteen free GPUs: MayFit says no")
	}
	results, err := n.Allocate(context.Background(), oneEach("gpu", 17))
	if results != nil || err != nil {
		t.Fatalf("seventeen on sixteen: got %d results, %v; want no fit and no error", len(results), err)
	}
	if seen[dryrun.Infeasible] != 1 || len(seen) != 1 {
		t.Errorf("outcomes %v, want one infeasible run", seen)
	}
}

// A pool between generations: the allocator chooses among them by which
// slices reach the node, so MayFit does not count its driver's devices.
func TestMayFitDoesNotCountAPoolBetweenGenerations(t *testing.T) {
	older, newer := identicalGPUs("node-0", 16), identicalGPUs("node-0", 4)
	newer.Name, newer.Spec.Pool.Generation = "node-0-newer", 2
	cycle := dryrun.NewCycle(dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL},
		emptyState(), nil, []*resourceapi.ResourceSlice{older, newer})
	if !cycle.Node(nodeNamed("node-0")).MayFit(oneEach("gpu", 8)) {
		t.Error("MayFit refused eight GPUs of a pool between generations of 16 and 4")
	}
}

// A search the count cannot refuse (a class that selects by attribute,
// not by driver, so every device of the node counts) is ended by the run
// timeout, and said to be.
func TestASearchThatCannotFinishTimesOut(t *testing.T) {
	seen := outcomes{}
	nics := identicalGPUs("node-0", 16)
	nics.Spec.Driver, nics.Spec.Pool.Name, nics.Name = dracases.NICDriver, "node-0-nics", "node-0-nics"
	cycle := dryrun.NewCycle(dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL,
		RunTimeout: 200 * time.Millisecond, Observe: seen.observe},
		emptyState(), nil, []*resourceapi.ResourceSlice{identicalGPUs("node-0", 16), nics})
	n := cycle.Node(nodeNamed("node-0"))
	claims := oneEach("any-a100", 17) // 32 devices of any driver, 16 of them a100s
	if !n.MayFit(claims) {
		t.Fatal("MayFit refused claims it cannot count: it must stay conservative")
	}
	results, err := n.Allocate(context.Background(), claims)
	if results != nil || !errors.Is(err, dryrun.ErrTimedOut) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %d results, %v; want ErrTimedOut", len(results), err)
	}
	if seen[dryrun.TimedOut] != 1 {
		t.Errorf("outcomes %v, want one timeout", seen)
	}
	// The caller's deadline bounds the run too, and an expired one runs
	// nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Allocate(ctx, oneEach("gpu", 1)); !errors.Is(err, dryrun.ErrTimedOut) {
		t.Errorf("with the caller's context done: %v, want ErrTimedOut", err)
	}
}

// A GPU of 80Gi offered as eight partitions of 10Gi and as itself: nine
// devices, but at most eight of them together; with one partition in
// use, seven.
func TestCountersBoundThePartitions(t *testing.T) {
	consumes := func(memory string) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}}}}
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dracases.GPUDriver, NodeName: ptr.To("node-0"),
		Pool: resourceapi.ResourcePool{Name: "node-0", Generation: 1, ResourceSliceCount: 2},
	}}
	counters := slice.DeepCopy()
	counters.Name = "node-0-counters"
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}}
	slice.Spec.Devices = []resourceapi.Device{{Name: "gpu-0", ConsumesCounters: consumes("80Gi")}}
	for i := range 8 {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-0-part-%d", i), ConsumesCounters: consumes("10Gi")})
	}
	slices := []*resourceapi.ResourceSlice{counters, slice}
	allocating := dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL}

	n := dryrun.NewCycle(allocating, emptyState(), nil, slices).Node(nodeNamed("node-0"))
	if !n.MayFit(oneEach("gpu", 8)) || n.MayFit(oneEach("gpu", 9)) {
		t.Errorf("MayFit(8)=%v MayFit(9)=%v; want eight partitions and no more", n.MayFit(oneEach("gpu", 8)), n.MayFit(oneEach("gpu", 9)))
	}
	if results, err := n.Allocate(context.Background(), oneEach("gpu", 8)); err != nil || len(results) != 8 {
		t.Errorf("eight partitions: %d results, %v", len(results), err)
	}

	inUse := emptyState()
	inUse.AllocatedDevices.Insert(structured.MakeDeviceID(dracases.GPUDriver, "node-0", "gpu-0-part-3"))
	n = dryrun.NewCycle(allocating, inUse, nil, slices).Node(nodeNamed("node-0"))
	if !n.MayFit(oneEach("gpu", 7)) || n.MayFit(oneEach("gpu", 8)) {
		t.Errorf("with one partition in use: MayFit(7)=%v MayFit(8)=%v; want seven and no more", n.MayFit(oneEach("gpu", 7)), n.MayFit(oneEach("gpu", 8)))
	}
}

// MayFit is conservative: over the differential test's random clusters
// and claims, whenever it says no, upstream's allocator finds no fit
// either; and it says no often enough for that to mean something.
func TestMayFitNeverRefusesWhatFits(t *testing.T) {
	ctx := context.Background()
	refused := 0
	for seed := range uint64(2000) {
		c := dracases.New(seed)
		for setName, features := range dracases.FeatureSets {
			state := emptyState()
			state.AllocatedDevices = c.InUse
			allocator, err := structured.NewAllocator(ctx, features, state, dracases.Classes, c.Slices, dracases.CEL)
			if err != nil {
				t.Fatal(err)
			}
			cycle := dryrun.NewCycle(dryrun.Allocating{Features: features, Classes: dracases.Classes, CEL: dracases.CEL}, state, c.Withheld, c.Slices)
			for _, node := range c.Nodes {
				if cycle.Node(node).MayFit(c.Claims) {
					continue
				}
				refused++
				if results, err := allocator.Allocate(ctx, node, c.Claims); err == nil && len(results) == len(c.Claims) {
					t.Errorf("seed %d, features %s, %s: MayFit says no, the allocator fits them\nclaims: %s", seed, setName, node.Name, dracases.DescribeClaims(c.Claims))
				}
			}
		}
	}
	if refused == 0 {
		t.Error("MayFit refused no node in 2000 cases: the test proves nothing")
	}
	t.Logf("MayFit refused %d node verdicts", refused)
}

// Devices kept in use for no claim (withheld as Unhealthy) do not count
// free, and FreeKept makes them count, for the node's share only.
func TestFreeKeptCountsKeptDevicesFree(t *testing.T) {
	state := emptyState()
	kept := sets.New[structured.DeviceID]()
	for i := range 4 {
		id := structured.MakeDeviceID(dracases.GPUDriver, "node-0", fmt.Sprintf("gpu-%d", i))
		state.AllocatedDevices.Insert(id)
		kept.Insert(id)
	}
	cycle := dryrun.NewCycle(dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL},
		state, kept, []*resourceapi.ResourceSlice{identicalGPUs("node-0", 8)})
	n := cycle.Node(nodeNamed("node-0"))
	if n.MayFit(oneEach("gpu", 5)) {
		t.Fatal("five GPUs on a node with four of eight kept: MayFit says yes")
	}
	n.FreeKept(kept)
	if !n.MayFit(oneEach("gpu", 8)) {
		t.Error("after FreeKept, eight GPUs on eight: MayFit says no")
	}
	if cycle.Node(nodeNamed("node-0")).MayFit(oneEach("gpu", 5)) {
		t.Error("FreeKept on one node's share changed the cycle's")
	}
}
