package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
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

const signalledKey fwk.StateKey = Name + "/signalled"

// signalled are the claim UIDs of the in-flight allocations a pod uses
// after Reserve.
type signalled struct{ uids []types.UID }

func (s signalled) Clone() fwk.StateData { return s }

// Reserve runs upstream's and notes the allocations it put in flight.
func (pl *DRAScope) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if pl.manager == nil || (len(pod.Spec.ResourceClaims) == 0 && !requestsExtendedResources(pod)) {
		// Nothing of the pod can be in flight: most pods of a cluster.
		return pl.DynamicResources.Reserve(ctx, state, pod, nodeName)
	}
	if status := pl.filterChosenIfMemoized(ctx, state, pod, nodeName); !status.IsSuccess() {
		return status
	}
	before := pl.manager.claims.pendingUIDs()
	status := pl.DynamicResources.Reserve(ctx, state, pod, nodeName)
	after := pl.manager.claims.pendingUIDs()
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
	if status.IsSuccess() && podGroupPreemptionIn(ctx) != nil {
		pl.recordChosen(whatIfIn(state))
	}
	if status.IsSuccess() && len(pod.Spec.ResourceClaims) > 0 {
		// A holder from now on, before the informer sees it bound
		// (holders.go).
		pl.claimHolders.reserve(pod, nodeName)
	}
	return status
}

// Unreserve runs upstream's, and forgets the pod as a holder Reserve
// recorded: it is not bound.
func (pl *DRAScope) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	pl.DynamicResources.Unreserve(ctx, state, pod, nodeName)
	pl.claimHolders.unreserve(pod.UID)
	if pl.waiting != nil {
		// It retries with upstream's backoff, not when a hold ends.
		pl.waiting.ForgetWaitingPod(pod)
	}
}

// PreBind marks the pod's in-flight allocations as being written, then
// runs upstream's, which writes them.
func (pl *DRAScope) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if s, ok := fromCycle[signalled](state, signalledKey); ok && pl.manager != nil {
		pl.manager.claims.startWriting(s.uids)
	}
	// A gang member that got this far needs its plan no more.
	pl.gangPlans.forget([]*v1.Pod{pod})
	return pl.DynamicResources.PreBind(ctx, state, pod, nodeName)
}

// pendingUIDs are the UIDs of this profile's in-flight allocations.
func (t *claimTracker) pendingUIDs() sets.Set[types.UID] {
	t.pending.mu.Lock()
	defer t.pending.mu.Unlock()
	uids := sets.New[types.UID]()
	for uid := range t.pending.byClaim {
		uids.Insert(uid)
	}
	return uids
}

// startWriting marks in-flight allocations as possibly written from now on.
func (t *claimTracker) startWriting(uids []types.UID) {
	t.pending.mu.Lock()
	defer t.pending.mu.Unlock()
	if t.pending.writing == nil {
		t.pending.writing = sets.New[types.UID]()
	}
	for _, uid := range uids {
		if _, inFlight := t.pending.byClaim[uid]; inFlight {
			t.pending.writing.Insert(uid)
		}
	}
}
