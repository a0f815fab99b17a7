package drascope

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// TestEarlyRefusalOnlyWhereUpstreamWouldAllocate is differential: for each
// pod, upstream's real PreFilter (v1.37.1, through the decorator) runs
// beside the early refusal's gate (mayRefuseEarly, then the index's hint,
// which an empty index gives for every request it can resolve). Wherever
// the gate would let DRAScope refuse a pod without upstream's PreFilter,
// upstream's PreFilter must have succeeded and built an allocator: then
// only the allocator's answer, which pruning stands in for, could refuse
// the pod, and skipping upstream changes nothing. Each case also pins
// whether the gate opens, so that a gate that never opens fails too.
func TestEarlyRefusalOnlyWhereUpstreamWouldAllocate(t *testing.T) {
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
				pl.claimHolders.set(tc.holder)
			}

			claims := pl.claimsOf(pod)
			gate := pl.mayRefuseEarly(pod, claims) && pl.index.NothingFree(claims.toAllocate, pl.deviceClass)

			info := framework.NewNodeInfo()
			info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
			manager.capture.begin()
			_, status := upstream.PreFilter(ctx, framework.NewCycleState(), pod, []fwk.NodeInfo{info})
			_, _, built := manager.capture.take()
			if gate && !(status.IsSuccess() && built) {
				t.Errorf("the early refusal's gate opens, but upstream's PreFilter returned %v (allocator built: %v): refusing early would replace upstream's answer", status, built)
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
