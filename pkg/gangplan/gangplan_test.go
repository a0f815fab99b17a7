package gangplan_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/drascope/drascope/pkg/gangplan"
)

var allFeatures = dracases.FeatureSets["all"]

func node(name string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
}

func cycleOver(inUse sets.Set[structured.DeviceID], slices ...*resourceapi.ResourceSlice) *dryrun.Cycle {
	state := structured.AllocatedState{
		AllocatedDevices:         inUse,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	return dryrun.NewCycle(dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL}, state, sets.New[structured.DeviceID](), slices)
}

// partitionable is kubernetes/kubernetes#138765's device: one GPU of 80Gi,
// offered whole or as two halves on a shared counter (a pool of two
// slices: the counters, and the devices).
func partitionable(nodeName string) []*resourceapi.ResourceSlice {
	device := func(name, memory string) resourceapi.Device {
		return resourceapi.Device{
			Name:       name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"partition": {StringValue: ptr.To(name)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}},
			}},
		}
	}
	slice := func(name string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: nodeName + name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: dracases.GPUDriver, Pool: resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 2}, NodeName: ptr.To(nodeName),
		}}
	}
	counters, devices := slice("-counters"), slice("-devices")
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}}
	devices.Spec.Devices = []resourceapi.Device{device("whole", "80Gi"), device("half-a", "40Gi"), device("half-b", "40Gi")}
	return []*resourceapi.ResourceSlice{counters, devices}
}

// wholeOrHalf prefers the whole GPU and takes a half when it must.
func wholeOrHalf(name string) *resourceapi.ResourceClaim {
	partition := func(sub, prefix string) resourceapi.DeviceSubRequest {
		return resourceapi.DeviceSubRequest{Name: sub, DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.example.com"].?partition.orValue("").startsWith(%q)`, prefix),
			}}}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		partition("whole", "whole"), partition("half", "half"),
	}}}
	return claim
}

func gpusOf(nodeName string, n int) *resourceapi.ResourceSlice {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dracases.GPUDriver, Pool: resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To(nodeName),
	}}
	for i := range n {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	return slice
}

func gpus(name string, count int64) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}}
	return claim
}

func member(name string, claims ...*resourceapi.ResourceClaim) gangplan.Member {
	return gangplan.Member{Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}, Claims: claims}
}

// checkPlan checks that every member is placed, on a node the test allows,
// with devices no other member got.
func checkPlan(t *testing.T, plan map[types.UID]gangplan.Placement, members []gangplan.Member, nodeOK func(member, node string) bool) {
	t.Helper()
	taken := sets.New[structured.DeviceID]()
	for _, m := range members {
		p, ok := plan[m.Pod.UID]
		if !ok {
			t.Fatalf("member %s has no placement in %v", m.Pod.Name, plan)
		}
		if !nodeOK(m.Pod.Name, p.Node) {
			t.Errorf("member %s placed on %s", m.Pod.Name, p.Node)
		}
		if p.Devices.Len() == 0 || taken.HasAny(p.Devices.UnsortedList()...) {
			t.Errorf("member %s got devices %v, with %v taken by the others", m.Pod.Name, p.Devices.UnsortedList(), taken.UnsortedList())
		}
		taken = taken.Union(p.Devices)
	}
}

// The reproducer's shape: one by one, the first member takes the whole GPU
// and the second finds nothing; together, each gets a half.
func TestPlanGivesEachMemberAHalfWhereOneByOneFails(t *testing.T) {
	ctx := context.Background()
	slices := partitionable("node-0")
	members := []gangplan.Member{member("m0", wholeOrHalf("c0")), member("m1", wholeOrHalf("c1"))}

	// One by one, as upstream's gang cycle allocates.
	n := cycleOver(sets.New[structured.DeviceID](), slices...).Node(node("node-0"))
	first, err := n.Allocate(ctx, members[0].Claims)
	if err != nil || first == nil {
		t.Fatalf("the first member alone: %v, %v", first, err)
	}
	if got := first[0].Devices.Results[0].Device; got != "whole" {
		t.Fatalf("the first member alone got %s, want whole (the case needs the greedy choice)", got)
	}
	n.Take(&first[0])
	if second, err := n.Allocate(ctx, members[1].Claims); second != nil {
		t.Fatalf("the second member fit after the first took the whole GPU: %v (%v); the case shows nothing", second, err)
	}

	plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), slices...), []*v1.Node{node("node-0")}, members, 16)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, members, func(_, node string) bool { return node == "node-0" })
	for _, m := range members {
		for id := range plan[m.Pod.UID].Devices {
			if id.Device.String() == "whole" {
				t.Errorf("member %s planned on the whole GPU: the other cannot fit", m.Pod.Name)
			}
		}
	}
}

func TestPlanSpreadsMembersOverNodesAndRefusesWhatDoesNotFit(t *testing.T) {
	ctx := context.Background()
	nodes := []*v1.Node{node("node-0"), node("node-1"), node("node-2")}
	slices := []*resourceapi.ResourceSlice{gpusOf("node-0", 4), gpusOf("node-1", 2), gpusOf("node-2", 2)}
	// gpu-0 and gpu-1 of node-0 are in use: two free on each node.
	inUse := sets.New(structured.MakeDeviceID(dracases.GPUDriver, "node-0", "gpu-0"), structured.MakeDeviceID(dracases.GPUDriver, "node-0", "gpu-1"))

	var members []gangplan.Member
	for i := range 3 {
		members = append(members, member(fmt.Sprintf("m%d", i), gpus(fmt.Sprintf("c%d", i), 2)))
	}
	plan, err := gangplan.Plan(ctx, cycleOver(inUse, slices...), nodes, members, 32)
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]int{}
	checkPlan(t, plan, members, func(_, node string) bool { onNode[node]++; return onNode[node] == 1 })
	for id := range plan[members[0].Pod.UID].Devices {
		if inUse.Has(id) {
			t.Errorf("planned a device in use: %s", id)
		}
	}

	four := append(members, member("m3", gpus("c3", 2)))
	if plan, err := gangplan.Plan(ctx, cycleOver(inUse, slices...), nodes, four, 32); err != nil || plan != nil {
		t.Errorf("four members of 2 GPUs on 6 free GPUs: got %v, %v; want no plan", plan, err)
	}
}

func TestPlanKeepsMembersToTheirNodes(t *testing.T) {
	ctx := context.Background()
	nodes := []*v1.Node{node("node-0"), node("node-1")}
	slices := []*resourceapi.ResourceSlice{gpusOf("node-0", 2), gpusOf("node-1", 2)}
	pinned := member("pinned", gpus("c-pinned", 1))
	pinned.Pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-1"}
	members := []gangplan.Member{pinned, member("free", gpus("c-free", 2))}
	plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), slices...), nodes, members, 32)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, members, func(m, node string) bool { return m != "pinned" || node == "node-1" })
}

func TestPlanStopsWhenTheBudgetIsUsedUp(t *testing.T) {
	ctx := context.Background()
	nodes := []*v1.Node{node("node-0"), node("node-1")}
	slices := []*resourceapi.ResourceSlice{gpusOf("node-0", 1), gpusOf("node-1", 1)}
	members := []gangplan.Member{member("m0", gpus("c0", 1)), member("m1", gpus("c1", 1))}
	// Each node of one GPU is asked for one member only: two runs.
	if _, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), slices...), nodes, members, 1); !errors.Is(err, gangplan.ErrBudget) {
		t.Errorf("two nodes, one run where two are needed: got %v, want ErrBudget", err)
	}
	if plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), slices...), nodes, members, 2); err != nil || len(plan) != 2 {
		t.Errorf("with budget 2: %v, %v", plan, err)
	}
	// The time is the other budget: a plan whose time is up runs nothing.
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := gangplan.Plan(expired, cycleOver(sets.New[structured.DeviceID](), slices...), nodes, members, 256); !errors.Is(err, gangplan.ErrBudget) {
		t.Errorf("with the time up: got %v, want ErrBudget", err)
	}
}

// A gang of 17 one-GPU members pinned to a node of 16 identical GPUs, and
// one of 9 two-GPU members: the bisection never asks the node for more
// members than its free devices could hold, so no run searches a prefix
// the allocator would take every permutation to refuse, and the plan says
// quickly that the gang does not fit.
func TestPlanAsksNoNodeForMoreThanCouldFit(t *testing.T) {
	for _, tc := range []struct {
		members int
		each    int64
	}{{17, 1}, {9, 2}} {
		t.Run(fmt.Sprintf("%dx%d", tc.members, tc.each), func(t *testing.T) {
			runs := map[dryrun.Outcome]int{}
			state := structured.AllocatedState{
				AllocatedDevices:         sets.New[structured.DeviceID](),
				AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
				AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
			}
			cycle := dryrun.NewCycle(dryrun.Allocating{Features: allFeatures, Classes: dracases.Classes, CEL: dracases.CEL,
				Observe: func(o dryrun.Outcome) { runs[o]++ }}, state, sets.New[structured.DeviceID](), []*resourceapi.ResourceSlice{gpusOf("node-0", 16)})
			var members []gangplan.Member
			for i := range tc.members {
				members = append(members, member(fmt.Sprintf("m%d", i), gpus(fmt.Sprintf("c%d", i), tc.each)))
			}
			plan, err := gangplan.Plan(context.Background(), cycle, []*v1.Node{node("node-0")}, members, 256)
			if plan != nil || err != nil {
				t.Fatalf("got %v, %v; want no plan", plan, err)
			}
			if runs[dryrun.NoFit]+runs[dryrun.Infeasible]+runs[dryrun.TimedOut] != 0 || runs[dryrun.Fit] == 0 {
				t.Errorf("runs %v: want only prefixes that fit asked for", runs)
			}
		})
	}
}

// Nodes that reach no device cost no allocator run: a gang behind 100 of
// them is planned on a budget of 4.
func TestPlanSpendsNothingOnNodesWithoutDevices(t *testing.T) {
	ctx := context.Background()
	var nodes []*v1.Node
	for i := range 100 {
		nodes = append(nodes, node(fmt.Sprintf("cpu-%d", i)))
	}
	nodes = append(nodes, node("gpu-node"))
	members := []gangplan.Member{member("m0", gpus("c0", 1)), member("m1", gpus("c1", 1)), member("launcher")}
	plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), gpusOf("gpu-node", 2)), nodes, members, 4)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, members[:2], func(_, node string) bool { return node == "gpu-node" })
	if _, ok := plan["launcher"]; ok {
		t.Error("a member without claims got a placement")
	}
}

// A pool every node reaches: its devices planned for members on one node
// are not free again on the next.
func TestPlanCountsNetworkDevicesOnceAcrossNodes(t *testing.T) {
	ctx := context.Background()
	fabric := gpusOf("fabric", 2)
	fabric.Spec.NodeName, fabric.Spec.AllNodes = nil, ptr.To(true)
	nodes := []*v1.Node{node("node-0"), node("node-1")}
	var members []gangplan.Member
	for i := range 3 {
		members = append(members, member(fmt.Sprintf("m%d", i), gpus(fmt.Sprintf("c%d", i), 1)))
	}
	if plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), fabric), nodes, members, 32); err != nil || plan != nil {
		t.Errorf("three members of one device, two network devices: got %v, %v; want no plan", plan, err)
	}
	plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), fabric), nodes, members[:2], 32)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, members[:2], func(string, string) bool { return true })
}

// A node the member may not run on (NoSchedule taint it does not
// tolerate, cordoned) is not planned for it.
func TestPlanLeavesOutNodesTheMemberMayNotRunOn(t *testing.T) {
	ctx := context.Background()
	tainted, cordoned := node("tainted"), node("cordoned")
	tainted.Spec.Taints = []v1.Taint{{Key: "dedicated", Value: "other", Effect: v1.TaintEffectNoSchedule}}
	cordoned.Spec.Unschedulable = true
	nodes := []*v1.Node{tainted, cordoned, node("open")}
	slices := []*resourceapi.ResourceSlice{gpusOf("tainted", 2), gpusOf("cordoned", 2), gpusOf("open", 2)}
	members := []gangplan.Member{member("m0", gpus("c0", 2))}
	plan, err := gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), slices...), nodes, members, 32)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, members, func(_, node string) bool { return node == "open" })
	members[0].Pod.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists}}
	plan, err = gangplan.Plan(ctx, cycleOver(sets.New[structured.DeviceID](), slices...), nodes, members, 32)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, members, func(_, node string) bool { return node == "tainted" })
}
