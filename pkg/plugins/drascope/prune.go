package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// pruneNodes narrows the nodes Filter runs on to those that could satisfy
// the pod's claims (pkg/nodeprune), from exactly the in-use set and slices
// upstream's PreFilter built this cycle's allocator from, which the
// decorator saw go by. Nodes left out get UnschedulableAndUnresolvable
// from the framework without Filter running; so that pruning switches off
// nothing Filter or preemption does for them, it keeps nodes whose only
// free devices are withheld (Filter explains them and retries the pod when
// they recover) and, for a pod that may preempt, nodes where pods of lower
// priority hold claims (DRA-aware preemption, preemption.go, must reach
// them). It returns nil (every node) when it does not prune: without a
// cycle view (takeCycleView), and for pods asking for admin access.
func (pl *DRAScope) pruneNodes(ctx context.Context, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims, view *cycleView) (*fwk.PreFilterResult, *fwk.Status) {
	if view == nil {
		return nil, nil
	}
	var byName []*v1.Node
	list := func() []*v1.Node {
		if byName == nil {
			byName = make([]*v1.Node, 0, len(nodes))
			for _, n := range nodes {
				if node := n.Node(); node != nil {
					byName = append(byName, node)
				}
			}
		}
		return byName
	}
	tracker := pl.manager.claims.ResourceClaimTracker
	pruning := nodeprune.View{
		Slices: view.slices, InUse: view.seen.state.AllocatedDevices, Withheld: view.seen.withheld, Kept: view.seen.kept,
		InFlight: func(uid types.UID) bool { return tracker.GetPendingAllocation(uid) != nil },
		IDs:      &pl.deviceIDs,
	}
	// The framework's node list holds only nodes with a Node object, and
	// the snapshot's lookup finds exactly those.
	has := func(name string) bool {
		_, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(name)
		return err == nil
	}
	var candidates sets.Set[string]
	var all bool
	if pl.index != nil {
		candidates, all = pl.index.Candidates(claims.toAllocate, pl.deviceClass, pruning, nodeprune.Nodes{Count: len(nodes), Has: has, List: list})
	} else {
		candidates, all = nodeprune.Candidates(claims.toAllocate, pl.deviceClass, pruning, list())
	}
	if all {
		return nil, nil
	}
	if mayPreempt(pod) {
		if !pl.claimHolders.known() {
			// Which nodes pods of lower priority hold devices on is
			// not known yet: prune nothing rather than hide them.
			return nil, nil
		}
		pl.claimHolders.keepPreemptible(candidates, pod, has)
	}
	if candidates.Len() == len(nodes) {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	if candidates.Len() == 0 {
		logger.V(5).Info("No node reaches a free device for every request", "pod", klog.KObj(pod), "nodes", len(nodes))
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, noFreeDevice)
	}
	logger.V(5).Info("Nodes that reach a free device for every request", "pod", klog.KObj(pod), "candidates", candidates.Len(), "nodes", len(nodes))
	return &fwk.PreFilterResult{NodeNames: candidates}, nil
}

// deviceClass is the DeviceClass of that name, as upstream's allocator
// reads it.
func (pl *DRAScope) deviceClass(name string) (*resourceapi.DeviceClass, error) {
	return pl.manager.DeviceClasses().Get(name)
}

// cycleView is what upstream's PreFilter built this cycle's allocator from,
// which the decorator saw go by.
type cycleView struct {
	seen   *inUseSeen
	slices []*resourceapi.ResourceSlice
	// layout is the filter memo's layout of slices, once laid out this
	// cycle (layoutOf): the served pools and the memo read the same one.
	layout *memoLayout
}

// takeCycleView returns what upstream's allocator was built from, for the
// pod's claims as DRAScope gathered them, or nil when there is nothing
// node pruning and preemption's dry runs can work with: claims already
// allocated, not yet readable, being allocated for another pod of their
// group, or changed while upstream's PreFilter ran, and pods with extended
// resources, which DRA or a device plugin may serve.
func (pl *DRAScope) takeCycleView(pod *v1.Pod, claims *podClaims) *cycleView {
	if pl.manager == nil {
		return nil
	}
	seen, slices, ok := pl.manager.capture.take()
	if !ok {
		// Upstream built no allocator this cycle.
		return nil
	}
	if !allToAllocate(pod, claims) || !pl.claimsUnchanged(claims) {
		return nil
	}
	return &cycleView{seen: seen, slices: slices}
}

// allToAllocate reports whether every claim of the pod is known and still
// to allocate, and the pod asks for no extended resources (which DRA or a
// device plugin may serve): the pods whose devices node pruning and the
// dry runs can follow.
func allToAllocate(pod *v1.Pod, claims *podClaims) bool {
	return claims.unknown == 0 && claims.allocated == 0 && len(claims.toAllocate) > 0 && !requestsExtendedResources(pod)
}

// claimsUnchanged reports whether the claims DRAScope read before upstream's
// PreFilter are what upstream worked with: still unallocated, at the same
// resource version, and without an allocation in flight. A claim another
// pod allocated in between (its binding wrote it), or one a pod of the same
// group is allocating (upstream's Filter then checks that pending
// allocation's node, not a free device), would make a need of a claim that
// needs nothing.
func (pl *DRAScope) claimsUnchanged(claims *podClaims) bool {
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil {
			return false
		}
		now, err := pl.claims.Get(claim.Namespace, claim.Name)
		if err != nil || now.ResourceVersion != claim.ResourceVersion || now.Status.Allocation != nil {
			return false
		}
	}
	return true
}

// noFreeDevice is the refusal when no node reaches a free device for every
// request. It starts as upstream's Filter refusal does.
const noFreeDevice = "cannot allocate all claims: no node can reach a free device for every request"

// mayPreempt reports whether the pod may preempt others.
func mayPreempt(pod *v1.Pod) bool {
	return pod.Spec.PreemptionPolicy == nil || *pod.Spec.PreemptionPolicy != v1.PreemptNever
}

// requestsExtendedResources reports whether the pod asks for an extended
// resource, in a container or at pod level: one a device plugin serves, or
// one DRA may serve through a device class, by the class's
// extendedResourceName or its implicit deviceclass.resource.kubernetes.io/
// name (which IsExtendedResourceName does not count, being in the
// kubernetes.io domain; upstream's schedutil.IsDRAExtendedResourceName
// does).
func requestsExtendedResources(pod *v1.Pod) bool {
	extended := func(list v1.ResourceList) bool {
		for name := range list {
			if schedutil.IsDRAExtendedResourceName(name) {
				return true
			}
		}
		return false
	}
	if pod.Spec.Resources != nil && (extended(pod.Spec.Resources.Requests) || extended(pod.Spec.Resources.Limits)) {
		return true
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if extended(containers[i].Resources.Requests) || extended(containers[i].Resources.Limits) {
				return true
			}
		}
	}
	return false
}
