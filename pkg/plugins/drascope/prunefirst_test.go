package drascope

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// TestPruningFirstOnlyWhereUpstreamWouldAllocate is differential: for each
// pod, upstream's real PreFilter (v1.37.2, through the decorator) runs
// beside pruning first's gate (mayPruneFirst). Wherever the gate would let
// DRAScope prune before upstream's PreFilter (and refuse the pod without
// it, or serve it the pruned view), upstream's PreFilter must have
// succeeded and built an allocator: then only the allocator's answer,
// which pruning stands in for, could refuse the pod, skipping upstream
// changes nothing, and the allocator is built from the in-use set and
// slices alone. Each case also pins whether the gate opens, so that a gate
// that never opens fails too.
func TestPruningFirstOnlyWhereUpstreamWouldAllocate(t *testing.T) {
	mine := func(mutate ...func(*resourceapi.ResourceClaim)) *resourceapi.ResourceClaim {
		claim := captureClaim("mine")
		for _, m := range mutate {
			m(claim)
		}
		return claim
	}
	podFor := func(claim *resourceapi.ResourceClaim, mutate ...func(*v1.Pod)) *v1.Pod {
		pod := capturePod(claim)
		for _, m := range mutate {
			m(pod)
		}
		return pod
	}
	fromTemplate := func(claimName string) func(*v1.Pod) {
		return func(pod *v1.Pod) {
			pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
			if claimName != "" {
				pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(claimName)}}
			}
		}
	}
	ownedByPod := func(claim *resourceapi.ResourceClaim) {
		claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: "uid-pod", Controller: ptr.To(true)}}
	}
	prioritized := func(claim *resourceapi.ResourceClaim) {
		claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "one", DeviceClassName: captureDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}
	}

	for _, tc := range []struct {
		name   string
		claim  *resourceapi.ResourceClaim
		pod    *v1.Pod
		fts    func(*feature.Features)
		holder *v1.Pod
		// inFlight: the claim is being allocated for another pod.
		inFlight bool
		gate     bool
	}{
		{name: "a claim to allocate", claim: mine(), gate: true},
		{name: "a claim made for the pod from a template", claim: mine(ownedByPod), pod: podFor(mine(), fromTemplate("mine")), gate: true},
		{name: "a prioritized list", claim: mine(prioritized), fts: func(f *feature.Features) { f.EnableDRAPrioritizedList = true }, gate: true},
		{name: "a lower-priority pod that holds no claim", claim: mine(), holder: func() *v1.Pod { p := podWith("batch", -1, false); p.Spec.NodeName = "node-1"; return p }(), gate: true},

		{name: "a claim being deleted", claim: mine(func(c *resourceapi.ResourceClaim) {
			c.DeletionTimestamp = ptr.To(metav1.Now())
			c.Finalizers = []string{"example.com/keep"}
		})},
		{name: "a template's claim not made for the pod", claim: mine(), pod: podFor(mine(), fromTemplate("mine"))},
		{name: "a template's claim not created yet", claim: mine(), pod: podFor(mine(), fromTemplate(""))},
		{name: "a claim allocated already", claim: captureClaim("mine", "node-1", "gpu-0")},
		{name: "a claim being allocated for another pod", claim: mine(), inFlight: true},
		{name: "a prioritized list without DRAPrioritizedList", claim: mine(prioritized)},
		{name: "a class that does not exist", claim: mine(func(c *resourceapi.ResourceClaim) {
			c.Spec.Devices.Requests[0].Exactly.DeviceClassName = "fpga.example.com"
		})},
		{name: "admin access", claim: mine(func(c *resourceapi.ResourceClaim) { c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true) }),
			fts: func(f *feature.Features) { f.EnableDRAAdminAccess = true }},
		{name: "an extended resource", claim: mine(), pod: podFor(mine(), func(p *v1.Pod) {
			p.Spec.Containers = []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"example.com/gpu": resource.MustParse("1")}}}}
		})},
		{name: "a device class's implicit extended resource", claim: mine(), pod: podFor(mine(), func(p *v1.Pod) {
			p.Spec.Containers = []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{"deviceclass.resource.kubernetes.io/" + captureDriver: resource.MustParse("1")}}}}
		}), fts: func(f *feature.Features) { f.EnableDRAExtendedResource = true }},
		{name: "a resize deferred", claim: mine(), pod: podFor(mine(), func(p *v1.Pod) {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred}}
		}), fts: func(f *feature.Features) { f.EnableInPlacePodVerticalScalingSchedulerPreemption = true }},
		// DRAScope's own reasons to run upstream's PreFilter.
		{name: "a nominated pod", claim: mine(), pod: podFor(mine(), func(p *v1.Pod) { p.Status.NominatedNodeName = "node-1" })},
		{name: "a gang member", claim: mine(), pod: podFor(mine(), func(p *v1.Pod) {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("gang")}
		})},
		{name: "a pod that may preempt a lower-priority claim holder", claim: mine(), holder: func() *v1.Pod { p := podWith("batch", -1, true); p.Spec.NodeName = "node-1"; return p }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()

			pod := tc.pod
			if pod == nil {
				pod = capturePod(tc.claim)
			}
			objects := []runtime.Object{
				&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: captureDriver}},
				captureSlice("node-1", 2), tc.claim, pod,
			}
			fts := feature.Features{EnableDynamicResourceAllocation: true}
			if tc.fts != nil {
				tc.fts(&fts)
			}
			upstream, manager, _ := upstreamThroughDecorator(ctx, t, objects, fts, nil)
			if tc.inFlight {
				other := captureClaim("mine", "node-1", "gpu-1")
				other.UID = tc.claim.UID
				if err := manager.ResourceClaims().SignalClaimPendingAllocation(other.UID, other); err != nil {
					t.Fatal(err)
				}
			}
			pl := &DRAScope{DynamicResources: upstream, enabled: true, features: fts, manager: manager, claims: manager.ResourceClaims(),
				index: nodeprune.NewIndex(nodeprune.IndexOptions{})}
			if tc.holder != nil {
				pl.holders.Set(tc.holder)
			}

			claims := pl.claimsOf(pod)
			gate := pl.mayPruneFirst(pod, claims)

			info := framework.NewNodeInfo()
			info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
			manager.BeginCapture()
			_, status := upstream.PreFilter(ctx, framework.NewCycleState(), pod, []fwk.NodeInfo{info})
			_, _, built := manager.TakeCapture()
			if gate && !(status.IsSuccess() && built) {
				t.Errorf("pruning first's gate opens, but upstream's PreFilter returned %v (allocator built: %v): pruning first would replace upstream's answer", status, built)
			}
			if gate != tc.gate {
				t.Errorf("the gate opens: %v, want %v (upstream's PreFilter: %v)", gate, tc.gate, status)
			}
		})
	}
}

// An early refusal leaves no cycle state of upstream's: DRAScope's
// PostFilter must answer as upstream's would for such a pod
// (Unschedulable, nothing to do), not fail for the missing state.
func TestPostFilterAfterAnEarlyRefusal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claim := captureClaim("mine")
	pod := capturePod(claim)
	fts := feature.Features{EnableDynamicResourceAllocation: true}
	upstream, manager, _ := upstreamThroughDecorator(ctx, t, []runtime.Object{claim, pod}, fts, nil)
	pl := &DRAScope{DynamicResources: upstream, enabled: true, features: fts, manager: manager, claims: manager.ResourceClaims()}

	state := framework.NewCycleState()
	state.Write(refusedEarlyKey, refusedEarlyData{})
	result, status := pl.PostFilter(ctx, state, pod, nil)
	if result != nil || status.Code() != fwk.Unschedulable {
		t.Errorf("PostFilter after an early refusal = %v, %v; want nil, Unschedulable", result, status)
	}
}

// pruningFirstCluster is three nodes of two GPUs, every GPU held but
// node-2's gpu-1.
func pruningFirstCluster(ctx context.Context, t *testing.T, fts feature.Features) (*DRAScope, *recordingManager, *v1.Pod, []fwk.NodeInfo) {
	t.Helper()
	pl, _, recording, pod, infos := heldCluster(ctx, t, []string{"node-1", "node-2", "node-3"}, 2, func(node string, device int) bool {
		return node == "node-2" && device == 1
	}, fts)
	return pl, recording, pod, infos
}

// Where pruning leaves some nodes, upstream's PreFilter works on the view
// pruning gathered: no second copy of the in-use set, no second listing,
// and an allocator over the pools of the candidates only, whose Filter
// places the pod on the candidate.
func TestPruningFirstServesUpstreamItsView(t *testing.T) {
	for _, consumable := range []bool{false, true} {
		t.Run(fmt.Sprintf("consumable capacity %v", consumable), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			fts := feature.Features{EnableDynamicResourceAllocation: true, EnableDRAConsumableCapacity: consumable}
			pl, recording, pod, nodes := pruningFirstCluster(ctx, t, fts)

			state := framework.NewCycleState()
			result, status := pl.PreFilter(ctx, state, pod, nodes)
			if !status.IsSuccess() || result.AllNodes() || !result.NodeNames.Equal(sets.New("node-2")) {
				t.Fatalf("DRAScope's PreFilter = %v, %v; want node-2 only", result, status)
			}
			if calls := recording.claims.listCalls + recording.claims.gatherCalls; calls != 1 {
				t.Errorf("the in-use set was gathered %d times in the cycle, want once (pruning's, served to upstream)", calls)
			}
			if calls := recording.slices.calls; calls != 1 {
				t.Errorf("the slices were listed %d times in the cycle, want once", calls)
			}
			_, served, ok := pl.manager.TakeCapture()
			if !ok {
				t.Fatal("upstream's PreFilter built no allocator")
			}
			if len(served) != 1 || ptr.Deref(served[0].Spec.NodeName, "") != "node-2" {
				var names []string
				for _, slice := range served {
					names = append(names, slice.Name)
				}
				t.Errorf("upstream's allocator was built over slices %v, want node-2's only", names)
			}
			for _, node := range nodes {
				if node.Node().Name != "node-2" {
					continue
				}
				if status := pl.Filter(ctx, state, pod, node); !status.IsSuccess() {
					t.Errorf("Filter on node-2, which has a free GPU: %v", status)
				}
			}
		})
	}
}

// A claim that changes after pruning first read it, while upstream's
// PreFilter reads it again (here: another scheduler allocated it on node-1,
// which pruning left out): upstream's PreFilter runs again on its own view,
// and nothing is pruned on the old one.
func TestPruningFirstStandsDownWhenAClaimChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fts := feature.Features{EnableDynamicResourceAllocation: true}
	pl, recording, pod, nodes := pruningFirstCluster(ctx, t, fts)
	changed := false
	recording.claims.change = func(claim *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		if claim.Name != "mine" || !changed && !pl.manager.Serving() {
			return claim
		}
		changed = true
		allocated := captureClaim("mine", "node-1", "gpu-0")
		allocated.ResourceVersion = claim.ResourceVersion + "1"
		return allocated
	}

	result, status := pl.PreFilter(ctx, framework.NewCycleState(), pod, nodes)
	if !changed {
		t.Fatal("upstream's PreFilter did not read the claim while served")
	}
	if !status.IsSuccess() || !result.AllNodes() {
		t.Errorf("DRAScope's PreFilter = %v, %v; want every node: the claim is allocated now, and pruning's view is stale", result, status)
	}
}
