package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/nodeprune"
)

// pruneFirst prunes the nodes before upstream's PreFilter runs, on what
// that PreFilter would build its allocator from: it gathers the in-use set
// and the slice listing through the same decorated calls upstream makes
// (so held and withheld devices are in the in-use set, and the cycle's
// capture has them), and runs pruneNodes on that view, as it used to run
// right after upstream's PreFilter on the same calls' answers. Then:
//
//   - If no node is left, the pod is refused with pruneNodes' status,
//     without upstream's PreFilter (on a full cluster, most attempts).
//   - Otherwise upstream's PreFilter runs on the same view (servedView):
//     the in-use set gathered here, not a second copy of the tracker's,
//     and, when pruning left some nodes out, only the slices of the pools
//     that reach a candidate (poolsReaching), so that its
//     allocator is set up over the candidates instead of every node.
//     Filter runs on the candidates only, where that allocator answers as
//     one over every slice.
//
// It returns nil for a pod it does not prune first (mayPruneFirst), or
// when the view cannot be had: upstream's PreFilter then runs as always,
// and pruning after it.
//
// Skipping upstream's PreFilter is the same as running it only where
// upstream would have built an allocator and returned success
// (mayPruneFirst), and where nothing after it acts for the pod: the
// framework runs no Filter, Score, Reserve or PreBind after a PreFilter
// refusal; upstream's PostFilter acts only on claims already allocated or
// found unavailable by its Filter, and there are none (DRAScope's
// PostFilter answers for it: refusedEarly); preemption considers only
// nodes refused as Unschedulable, and a PreFilter refusal makes every
// node UnschedulableAndUnresolvable, as pruning to no node does. The
// pod's retry is unchanged: it is refused by this plugin at PreFilter
// either way, so the same queueing hints requeue it.
func (pl *DRAScope) pruneFirst(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims) (*prunedFirst, *fwk.Status) {
	if !pl.mayPruneFirst(pod, claims) {
		return nil, nil
	}
	var err error
	if pl.features.EnableDRAConsumableCapacity {
		_, err = pl.manager.claims.GatherAllocatedState()
	} else {
		_, err = pl.manager.claims.ListAllAllocatedDevices()
	}
	if err == nil {
		_, err = pl.manager.ResourceSlices().ListWithDeviceTaintRules()
	}
	if err != nil {
		// A concurrent modification, which upstream retries: let it.
		pl.manager.capture.begin()
		return nil, nil
	}
	view := pl.takeCycleView(pod, claims)
	if view == nil {
		// A claim changed since DRAScope read it.
		return nil, nil
	}
	result, status := pl.pruneNodes(ctx, pod, nodes, claims, view)
	if !status.IsSuccess() {
		metrics.ObserveEarlyRefusal(metrics.EarlyRefusalRefused)
		klog.FromContext(ctx).V(5).Info("Refused before upstream's PreFilter: no node reaches a free device for every request", "pod", klog.KObj(pod))
		state.Write(refusedEarlyKey, refusedEarlyData{})
		return nil, status
	}
	metrics.ObserveEarlyRefusal(metrics.EarlyRefusalPassed)
	served := &servedView{seen: view.seen, slices: view.slices}
	if !result.AllNodes() {
		served.slices = pl.poolsReaching(view, result.NodeNames)
	}
	return &prunedFirst{view: view, result: result, served: served}, nil
}

// poolsReaching returns the slices of the pools that reach a candidate
// (nodeprune.PoolsReaching). With the filter memo, it reads them from the
// memo's layout of the listing, which is kept from cycle to cycle: the
// pools that may reach any node and the candidates' own, without a pass
// over every slice and its pool's name each cycle. The layout counts a pool
// whose slices name different nodes among those that may reach any node,
// so such a pool is served whichever nodes are candidates: more than
// PoolsReaching serves, which the allocator reads only for the nodes those
// slices name. The order differs from the listing's, which is a map's:
// upstream's allocators read a pool's slices in name order (incubating) or
// in the order given, and the layout holds each bucket's by name.
func (pl *DRAScope) poolsReaching(view *cycleView, candidates sets.Set[string]) []*resourceapi.ResourceSlice {
	if pl.filterMemo == nil {
		return nodeprune.PoolsReaching(view.slices, candidates, pl.countersReachEveryNode)
	}
	return pl.layoutOf(view).reaching(candidates)
}

// prunedFirst is what pruneFirst gathered and decided.
type prunedFirst struct {
	// view is the whole cycle view, which preemption's dry runs read.
	view *cycleView
	// result are the nodes pruning kept (nil: every node).
	result *fwk.PreFilterResult
	// served is what upstream's PreFilter is handed.
	served *servedView
}

// servedView is what the decorated DRA manager hands upstream's PreFilter
// in place of fresh answers, while it is set: the in-use state, with what
// DRAScope added to it, and the slices.
type servedView struct {
	seen   *inUseSeen
	slices []*resourceapi.ResourceSlice
}

// upstreamPreFilter runs upstream's PreFilter, on the view pruning first
// gathered when there is one. Upstream reads the pod's claims again: if one
// changed since that view was taken (another scheduler allocated it, or
// another pod of its group is allocating it), upstream may have worked
// with the changed claim and the pruned slices, so it runs again on its
// own calls, and the view is dropped (pruning then runs after it, and
// finds the claims changed, as it always has).
func (pl *DRAScope) upstreamPreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims, first *prunedFirst) (*fwk.PreFilterResult, *fwk.Status, *prunedFirst) {
	if first == nil {
		result, status := pl.preFilterIgnoringCounters(ctx, state, pod, nodes, claims)
		return result, status, nil
	}
	result, status := pl.servedPreFilter(ctx, state, pod, nodes, claims, first.served)
	if !status.IsSuccess() || pl.claimsUnchanged(claims) {
		return result, status, first
	}
	klog.FromContext(ctx).V(5).Info("A claim changed while pruning first: upstream's PreFilter runs again on its own view", "pod", klog.KObj(pod))
	pl.manager.capture.begin()
	result, status = pl.preFilterIgnoringCounters(ctx, state, pod, nodes, claims)
	return result, status, nil
}

// mayPruneFirst reports whether upstream's PreFilter, for this pod now,
// would build an allocator and succeed, so that only the allocator's
// answer can refuse the pod, and the allocator is built from the in-use
// set and slices alone: each of its other returns in v1.37.2
// (dynamicresources.go, PreFilter and foreachPodResourceClaim) is ruled out
// here. It also leaves out what DRAScope's own PreFilter does besides
// pruning: gang members (plans, steering, dry runs, pod-group state),
// nominated pods (which may stay on their node while victims leave) and
// pods that may preempt pods holding claims at a lower priority (pruning
// keeps their nodes, and preemption's dry runs on them are not narrowed).
func (pl *DRAScope) mayPruneFirst(pod *v1.Pod, claims *podClaims) bool {
	if pl.index == nil || pl.manager == nil || !allToAllocate(pod, claims) ||
		pod.Spec.SchedulingGroup != nil || pod.Status.NominatedNodeName != "" {
		return false
	}
	if pl.features.EnableInPlacePodVerticalScalingSchedulerPreemption && resource.IsPodResizeDeferred(pod) {
		// Upstream skips the pod.
		return false
	}
	if mayPreempt(pod) && pl.claimHolders.anyBelow(corev1helpers.PodPriority(pod)) {
		return false
	}
	// Upstream reads the pod's claims again: each must exist (allToAllocate),
	// not be being deleted, and be the pod's own when made from a template.
	if claims.refused > 0 {
		return false
	}
	// Upstream refuses a class that does not exist by name.
	exists := func(class string) bool {
		if class == "" {
			return false
		}
		_, err := pl.deviceClass(class)
		return err == nil
	}
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil || firstAdminAccessRequest(claim) != "" {
			return false
		}
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil:
				if !exists(request.Exactly.DeviceClassName) {
					return false
				}
			case len(request.FirstAvailable) > 0:
				if !pl.features.EnableDRAPrioritizedList {
					return false
				}
				for _, sub := range request.FirstAvailable {
					if !exists(sub.DeviceClassName) {
						return false
					}
				}
			default:
				return false
			}
		}
	}
	return true
}

// servedPreFilter runs upstream's PreFilter while the decorated manager
// serves it served. Upstream's other listings of slices (node-allocatable
// resources in Filter, after this returns) and every call outside this
// cycle's PreFilter get fresh answers.
func (pl *DRAScope) servedPreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims, served *servedView) (*fwk.PreFilterResult, *fwk.Status) {
	pl.manager.served.Store(served)
	defer pl.manager.served.Store(nil)
	return pl.preFilterIgnoringCounters(ctx, state, pod, nodes, claims)
}

const refusedEarlyKey fwk.StateKey = Name + "/refused-early"

// refusedEarlyData marks a cycle whose pod pruneFirst refused: upstream's
// PreFilter did not run, and its cycle state is not there.
type refusedEarlyData struct{}

func (refusedEarlyData) Clone() fwk.StateData { return refusedEarlyData{} }

// refusedEarly reports whether pruneFirst refused the cycle's pod.
func refusedEarly(state fwk.CycleState) bool {
	_, ok := fromCycle[refusedEarlyData](state, refusedEarlyKey)
	return ok
}
