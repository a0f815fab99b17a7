package drascope

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/gangpreempt"
	"github.com/drascope/drascope/pkg/metrics"
)

// A release hold (pkg/releasehold) is for an allocation whose write may
// have reached the API although the scheduler saw it fail. Upstream writes
// allocations in PreBind only, and Unreserve looks the same to the claim
// tracker whether it undoes a scheduling cycle (nothing written) or a
// failed PreBind. So Reserve notes the in-flight allocations the pod uses
// (those it signalled, and those of its claims another pod of its group
// put in flight: either pod's PreBind may write them), PreBind marks them
// as being written before upstream's PreBind runs, and only a marked
// allocation is held when Unreserve drops it. A mark ends with its
// allocation: when it leaves the in-flight set, or a new allocation of the
// same claim enters it.

// Reserve runs upstream's and notes the allocations it put in flight
// (signalledKey); where the filter memo answered for the chosen node, it
// runs upstream's Filter there first. In a pod-group preemption's dry run
// it records the devices the member chose.
func (pl *DRAScope) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if pl.manager == nil || (len(pod.Spec.ResourceClaims) == 0 && !requestsExtendedResources(pod)) {
		// Nothing of the pod can be in flight: most pods of a cluster.
		return pl.DynamicResources.Reserve(ctx, state, pod, nodeName)
	}
	if status := pl.filterChosenIfMemoized(ctx, state, pod, nodeName); !status.IsSuccess() {
		return status
	}
	before := pl.manager.Claims().PendingUIDs()
	status := pl.DynamicResources.Reserve(ctx, state, pod, nodeName)
	after := pl.manager.Claims().PendingUIDs()
	// New ones (an extended-resource claim's is under a temporary UID),
	// and the pod's own claims already in flight for its group.
	uses := after.Difference(before)
	for _, claim := range pl.claimsIn(state, pod).toAllocate {
		if after.Has(claim.UID) {
			uses.Insert(claim.UID)
		}
	}
	if uses.Len() > 0 {
		state.Write(signalledKey, signalled{uids: uses.UnsortedList()})
	}
	if status.IsSuccess() && gangpreempt.From(ctx) == nil {
		// Not in a pod-group preemption's dry run, whose victims' claims
		// the side cache still counts: the real cycle checks.
		if refusal := pl.quotaExceeded(ctx, state, pod, after.Difference(before)); refusal != nil {
			// The framework's Unreserve gives the allocations up.
			return refusal
		}
	}
	if status.IsSuccess() && gangpreempt.From(ctx) != nil {
		whatIfIn(state).Chose(pl.claims.GetPendingAllocation, pl.allocating.Features.ConsumableCapacity)
	}
	if status.IsSuccess() && len(pod.Spec.ResourceClaims) > 0 {
		// A holder from now on, before the informer sees it bound.
		pl.holders.Reserve(pod, nodeName)
	}
	return status
}

// filterChosenIfMemoized runs upstream's Filter on the chosen node when the
// filter memo answered for it, so that upstream's Reserve finds its result
// there.
func (pl *DRAScope) filterChosenIfMemoized(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	memo := memoIn(state)
	if memo == nil || !memo.AnsweredFor(nodeName) {
		return nil
	}
	nodeInfo, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(err)
	}
	status := pl.filterExplained(ctx, state, pod, nodeInfo)
	if !status.IsSuccess() {
		// An error, not a refusal: no event may come to retry a pod
		// refused for an input the memo does not compare, and an error
		// retries it with backoff.
		metrics.ObserveFilterMemo(metrics.FilterMemoRefuted)
		klog.FromContext(ctx).Info("Upstream's Filter refused the node the filter memo accepted; the memo forgets everything", "pod", klog.KObj(pod), "node", nodeName, "status", status)
		memo.Forget()
		return fwk.AsStatus(fmt.Errorf("upstream's Filter refused node %s, which the filter memo accepted: %s", nodeName, status.Message()))
	}
	return status
}

// Unreserve runs upstream's, and forgets the pod as a holder Reserve
// recorded: it is not bound. Allocations a DeviceQuota let in and that it
// gave up free their namespace's quota without an API event, so the pods
// the quota refused while they were in flight are retried.
func (pl *DRAScope) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	pl.DynamicResources.Unreserve(ctx, state, pod, nodeName)
	pl.holders.Unreserve(pod.UID)
	if pl.waiting != nil {
		// It retries with upstream's backoff, not when a hold ends.
		pl.waiting.ForgetWaitingPod(pod)
	}
	if reserved, ok := fromCycle[quotaReservedData](state, quotaReservedKey); ok && pl.quotas != nil {
		pl.quotas.RetryQuotaWaiters(klog.FromContext(ctx), pod, reserved.epoch)
	}
}
