package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/metrics"
)

// refuseEarly refuses, before upstream's PreFilter runs, a pod that node
// pruning would refuse right after it: on a full cluster, most attempts.
// It gathers what upstream's PreFilter would build its allocator from,
// through the same decorated calls (so held and withheld devices are in
// the in-use set, and the cycle's capture has it), and prunes on that
// view exactly as pruneNodes does after upstream's PreFilter; the status is
// pruneNodes' own. It returns nil, and upstream's PreFilter runs as
// always, unless that view leaves no node.
//
// Skipping upstream's PreFilter is the same as running it only where
// upstream would have built an allocator and returned success
// (mayRefuseEarly), and where nothing after it acts for the pod: the
// framework runs no Filter, Score, Reserve or PreBind after a PreFilter
// refusal; upstream's PostFilter acts only on claims already allocated or
// found unavailable by its Filter, and there are none (DRAScope's
// PostFilter answers for it: refusedEarly); preemption considers only
// nodes refused as Unschedulable, and a PreFilter refusal makes every
// node UnschedulableAndUnresolvable, as pruning to no node does today.
// The pod's retry is unchanged: it is refused by this plugin at PreFilter
// either way, so the same queueing hints requeue it.
//
// Gathering the in-use set is most of what upstream's PreFilter costs (a
// copy of the tracker's set): the index's hint (nodeprune.Index.NothingFree)
// says first whether a refusal is likely, so that a pod that will be
// placed does not pay for the copy twice.
func (pl *DRAScope) refuseEarly(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims) *fwk.Status {
	if !pl.mayRefuseEarly(pod, claims) {
		return nil
	}
	if !pl.index.NothingFree(claims.toAllocate, pl.deviceClass) {
		return nil
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
		return nil
	}
	_, status := pl.pruneNodes(ctx, pod, nodes, claims, pl.takeCycleView(pod, claims))
	if status.IsSuccess() {
		metrics.ObserveEarlyRefusal(metrics.EarlyRefusalPassed)
		return nil
	}
	metrics.ObserveEarlyRefusal(metrics.EarlyRefusalRefused)
	klog.FromContext(ctx).V(5).Info("Refused before upstream's PreFilter: no node reaches a free device for every request", "pod", klog.KObj(pod))
	state.Write(refusedEarlyKey, refusedEarlyData{})
	return status
}

// mayRefuseEarly reports whether upstream's PreFilter, for this pod now,
// would build an allocator and succeed, so that only the allocator's
// answer can refuse the pod: each of its other returns in v1.37.1
// (dynamicresources.go, PreFilter and foreachPodResourceClaim) is ruled out
// here. It also leaves out what DRAScope's own PreFilter does besides
// pruning: gang members (plans, dry runs, pod-group state), nominated
// pods (which may stay on their node while victims leave) and pods that
// may preempt pods holding claims at a lower priority (pruning keeps
// their nodes).
func (pl *DRAScope) mayRefuseEarly(pod *v1.Pod, claims *podClaims) bool {
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
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil || firstAdminAccessRequest(claim) != "" {
			return false
		}
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil:
				if request.Exactly.DeviceClassName == "" {
					return false
				}
			case len(request.FirstAvailable) > 0:
				if !pl.features.EnableDRAPrioritizedList {
					return false
				}
				for _, sub := range request.FirstAvailable {
					if sub.DeviceClassName == "" {
						return false
					}
				}
			default:
				return false
			}
		}
	}
	// A class that does not exist, which upstream refuses by name, gives
	// the index's hint no need to answer for (nodeprune's needsOf): no
	// early refusal then.
	return true
}

const refusedEarlyKey fwk.StateKey = Name + "/refused-early"

// refusedEarlyData marks a cycle whose pod refuseEarly refused: upstream's
// PreFilter did not run, and its cycle state is not there.
type refusedEarlyData struct{}

func (refusedEarlyData) Clone() fwk.StateData { return refusedEarlyData{} }

// refusedEarly reports whether refuseEarly refused the cycle's pod.
func refusedEarly(state fwk.CycleState) bool {
	_, ok := fromCycle[refusedEarlyData](state, refusedEarlyKey)
	return ok
}
