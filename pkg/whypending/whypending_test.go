package whypending_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/whypending"
)

// clusterOf turns a random case into what a client reads: each device in
// use becomes a claim holding it, each withheld device a pool device the
// scheduler reports Unhealthy under the policy Avoid.
func clusterOf(c dracases.Case) (whypending.Cluster, *v1.Pod, []whypending.PodClaim) {
	var holders []*resourceapi.ResourceClaim
	held := c.InUse.Difference(c.Withheld).UnsortedList()
	slices.SortFunc(held, func(a, b structured.DeviceID) int { return strings.Compare(a.String(), b.String()) })
	for _, id := range held {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "holds-" + strings.ReplaceAll(id.String(), "/", "-"), UID: types.UID("holds-" + id.String())}}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "r", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()},
		}}}
		holders = append(holders, claim)
	}
	unhealthy := func(pool drausage.PoolID, device string) drausage.DeviceHealth {
		if c.Withheld.Has(structured.MakeDeviceID(pool.Driver, pool.Pool, device)) {
			return drausage.DeviceHealth{Status: v1.ResourceHealthStatusUnhealthy}
		}
		return drausage.DeviceHealth{}
	}
	pools := drausage.ComputePoolUsage(c.Slices, holders, drausage.Options{Health: unhealthy, WithholdUnhealthy: true})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}}
	var claims []whypending.PodClaim
	for _, claim := range c.Claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: claim.Name, ResourceClaimName: ptr.To(claim.Name)})
		claims = append(claims, whypending.PodClaim{Name: claim.Name, ResourceClaim: claim.Name, Claim: claim})
	}
	return whypending.Cluster{
		Nodes: c.Nodes, Slices: c.Slices, Classes: dracases.Classes, Pools: pools, Claims: holders,
		Features: whypending.DefaultFeatures,
	}, pod, claims
}

// upstreamFits are the nodes upstream's allocator, built over the whole
// cluster as DRAScope's PreFilter builds it, allocates every claim on: for
// a pod that asks for admin access only, over slices whose devices consume
// no counters (pkg/adminaccess).
func upstreamFits(t *testing.T, c dracases.Case) []string {
	t.Helper()
	state := structured.AllocatedState{
		AllocatedDevices:         c.InUse,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	listed := c.Slices
	if adminaccess.UseOf(c.Claims, 0, func() bool { return false }) == adminaccess.Only {
		listed = adminaccess.WithZeroCounterConsumption(listed)
	}
	var fits []string
	for _, node := range c.Nodes {
		allocator, err := structured.NewAllocator(context.Background(), whypending.DefaultFeatures, state, dracases.Classes, listed, dracases.CEL)
		if err != nil {
			t.Fatal(err)
		}
		results, err := allocator.Allocate(context.Background(), node, c.Claims)
		if err == nil && results != nil {
			fits = append(fits, node.Name)
		}
	}
	slices.Sort(fits)
	return fits
}

// TestFitAgreesWithUpstreamsAllocator is differential: on 200 random small
// clusters and pods, the nodes the report says the claims fit on are the
// nodes upstream's allocator, asked about each node over the whole
// cluster, allocates them on. The counts that choose which nodes to ask
// must never leave out one that fits, and the in-use set the report builds
// from claims and pools must be the scheduler's.
func TestFitAgreesWithUpstreamsAllocator(t *testing.T) {
	fitting, refused := 0, 0
	for seed := range uint64(200) {
		c := dracases.New(seed)
		cluster, pod, claims := clusterOf(c)
		report := whypending.Explain(context.Background(), pod, claims, cluster, whypending.Options{})
		want := upstreamFits(t, c)
		if report.Fit == nil {
			t.Fatalf("seed %d: no fit report for claims to allocate", seed)
		}
		got := report.Fit.Nodes
		if report.Fit.Count != len(want) || !slices.Equal(got, want[:min(len(want), whypending.MaxNodesNamed)]) {
			t.Errorf("seed %d: report fits %d nodes %v, upstream %v; claims %s; conclusion %q", seed, report.Fit.Count, got, want, dracases.DescribeClaims(c.Claims), report.Conclusion)
		}
		if len(want) > 0 {
			fitting++
			if !strings.HasPrefix(report.Conclusion, "the pod's devices fit on node "+want[0]) {
				t.Errorf("seed %d: conclusion %q, want it to say the devices fit on %s", seed, report.Conclusion, want[0])
			}
		} else {
			refused++
		}
	}
	if fitting < 20 || refused < 20 {
		t.Errorf("%d cases fit, %d do not: the cases test too little of one side", fitting, refused)
	}
}

// gpuNode is a node with n whole GPUs of a100s.
func gpuNode(name string, n int) (*v1.Node, *resourceapi.ResourceSlice) {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: dracases.GPUDriver, Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To(name)}}
	for i := range n {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("a100")}}})
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, slice
}

// TestVerdictNamesTheRequestAndWhatHoldsItsDevices: four GPUs on one node
// asked for, every node has four but at most three free; the verdict, the
// closest node and the conclusion say so, with the devices held by pods of
// lower priority counted for preemption.
func TestVerdictNamesTheRequestAndWhatHoldsItsDevices(t *testing.T) {
	c := dracases.Case{InUse: sets.New[structured.DeviceID](), Withheld: sets.New[structured.DeviceID]()}
	for i := range 3 {
		node, slice := gpuNode(fmt.Sprintf("node-%d", i), 4)
		c.Nodes, c.Slices = append(c.Nodes, node), append(c.Slices, slice)
		// One GPU of each node held, node-2's by two.
		c.InUse.Insert(structured.MakeDeviceID(dracases.GPUDriver, node.Name, "gpu-0"))
		if i == 2 {
			c.InUse.Insert(structured.MakeDeviceID(dracases.GPUDriver, node.Name, "gpu-1"))
		}
	}
	c.Claims = []*resourceapi.ResourceClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4}}},
	}}}}
	cluster, pod, claims := clusterOf(c)
	pod.Spec.Priority = ptr.To(int32(100))
	// The holders' pods: node-0's of priority 0, the others' of 100.
	for _, holder := range cluster.Claims {
		priority := int32(100)
		if strings.Contains(holder.Name, "node-0") {
			priority = 0
		}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "pod-" + holder.Name, UID: types.UID("pod-" + holder.Name)}, Spec: v1.PodSpec{Priority: &priority}}
		holder.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
		cluster.Pods = append(cluster.Pods, p)
	}
	// ComputePoolUsage read the claims before their consumers were set:
	// recompute with them.
	cluster.Pools = drausage.ComputePoolUsage(c.Slices, cluster.Claims, drausage.Options{})

	report := whypending.Explain(context.Background(), pod, claims, cluster, whypending.Options{})
	v := report.Claims[0].Requests[0].Verdict
	want := whypending.Verdict{Need: 4, NodesWithMatching: 3, NodesWithEnough: 0, MostFree: 3, NodesWithMostFree: 2,
		Devices: whypending.DeviceCounts{Matching: 12, Free: 8, Allocated: 4, HeldByLowerPriority: 1}}
	if v == nil || fmt.Sprint(*v) != fmt.Sprint(want) {
		t.Errorf("verdict %+v, want %+v", v, want)
	}
	if report.Fit.Count != 0 || report.Fit.Tried != 0 {
		t.Errorf("fit %+v: no node has four free, so none is asked", report.Fit)
	}
	if len(report.Closest) != 3 || report.Closest[0].Node != "node-0" || report.Closest[0].Lacks[0] != "gpu: 3 free of 4 needed (1 allocated)" {
		t.Errorf("closest %+v, want node-0 first lacking one GPU", report.Closest)
	}
	wantConclusion := "claim ns/train, request gpu needs 4 × gpu on one node; 3 nodes have matching devices, at most 3 free (on 2 nodes); of 12 matching devices 4 allocated; 1 are held by pods of lower priority, which preemption may take"
	if report.Conclusion != wantConclusion {
		t.Errorf("conclusion %q\nwant       %q", report.Conclusion, wantConclusion)
	}
}

// What RBAC hid is the conclusion, never a wrong verdict: hidden slices
// or classes are not "no matching device" or "the class does not exist";
// a pod without claims is not "every claim is allocated".
func TestConclusionSaysWhatWasHidden(t *testing.T) {
	c := dracases.New(1)
	for name, tc := range map[string]struct {
		change func(*whypending.Cluster, *[]whypending.PodClaim)
		want   string
	}{
		"slices hidden": {func(cl *whypending.Cluster, _ *[]whypending.PodClaim) {
			cl.SlicesHidden, cl.Slices, cl.Pools = true, nil, nil
		}, "the devices cannot be counted: listing ResourceSlices is not permitted"},
		"classes hidden": {func(cl *whypending.Cluster, _ *[]whypending.PodClaim) {
			cl.ClassesHidden, cl.Classes = true, nil
		}, "the requests cannot be matched to devices: listing DeviceClasses is not permitted"},
		"no claims": {func(_ *whypending.Cluster, claims *[]whypending.PodClaim) { *claims = nil },
			"the pod has no ResourceClaims: DRA does not keep it pending"},
	} {
		t.Run(name, func(t *testing.T) {
			cluster, pod, claims := clusterOf(c)
			tc.change(&cluster, &claims)
			r := whypending.Explain(context.Background(), pod, claims, cluster, whypending.Options{})
			if !strings.HasPrefix(r.Conclusion, tc.want) {
				t.Errorf("conclusion %q, want it to start %q", r.Conclusion, tc.want)
			}
		})
	}
}

// A claim of the pod already allocated on a node keeps the pod to the
// nodes its allocation allows: the others are not counted.
func TestAllocatedClaimKeepsThePodToItsNodes(t *testing.T) {
	c := dracases.Case{InUse: sets.New[structured.DeviceID](), Withheld: sets.New[structured.DeviceID]()}
	for i := range 2 {
		node, slice := gpuNode(fmt.Sprintf("node-%d", i), 1)
		c.Nodes, c.Slices = append(c.Nodes, node), append(c.Slices, slice)
	}
	request := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}
	pinned := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pinned"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request}}}}
	pinned.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}}}}}}
	c.Claims = []*resourceapi.ResourceClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "more"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request}}}}}
	cluster, pod, claims := clusterOf(c)
	claims = append(claims, whypending.PodClaim{Name: "pinned", ResourceClaim: "pinned", Claim: pinned})
	r := whypending.Explain(context.Background(), pod, claims, cluster, whypending.Options{})
	if r.Fit == nil || r.Fit.Count != 1 || r.Fit.Nodes[0] != "node-1" {
		t.Errorf("fit %+v, want node-1 alone: the pinned claim's node", r.Fit)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "1 of 2 nodes are left out by where the pod's allocated claims are") {
		t.Errorf("notes %q, want the node left out said", r.Notes)
	}
}
