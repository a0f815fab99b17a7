package drascope

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// decoratedHandle is the framework.Handle that upstream's DynamicResources
// plugin receives: the scheduler's own handle, except that SharedDRAManager
// returns drascope's decorator. This is the one seam through which drascope
// sees, and may add to, what the allocator treats as in use.
type decoratedHandle struct {
	fwk.Handle
	draManager fwk.SharedDRAManager
}

func (h *decoratedHandle) SharedDRAManager() fwk.SharedDRAManager {
	return h.draManager
}

// InFlightObserver is told about allocations the scheduler makes before the
// informers see them. Calls come from the scheduling path: they must only
// record and return.
type InFlightObserver interface {
	PendingAllocation(claim *resourceapi.ResourceClaim)
	PendingAllocationRemoved(uid types.UID)
	Assumed(claim *resourceapi.ResourceClaim)
	AssumeRestored(namespace, name string)
}

// draManager decorates the scheduler's SharedDRAManager. The manager it
// wraps is shared by every profile, so in-flight allocations of one profile
// are seen by the others and no device is handed out twice within one
// scheduler process; the decorator reports this profile's in-flight
// allocations to an observer (the pool side cache).
type draManager struct {
	fwk.SharedDRAManager
	claims claimTracker
}

func newDRAManager(inner fwk.SharedDRAManager, observer InFlightObserver) *draManager {
	return &draManager{
		SharedDRAManager: inner,
		claims:           claimTracker{ResourceClaimTracker: inner.ResourceClaims(), observer: observer},
	}
}

func (m *draManager) ResourceClaims() fwk.ResourceClaimTracker {
	return &m.claims
}

// claimTracker forwards to the scheduler's claim tracker and reports
// successful in-flight changes to the observer.
type claimTracker struct {
	fwk.ResourceClaimTracker
	observer InFlightObserver
}

func (t *claimTracker) SignalClaimPendingAllocation(uid types.UID, allocated *resourceapi.ResourceClaim) error {
	if err := t.ResourceClaimTracker.SignalClaimPendingAllocation(uid, allocated); err != nil {
		return err
	}
	if t.observer != nil {
		t.observer.PendingAllocation(allocated)
	}
	return nil
}

func (t *claimTracker) MaybeRemoveClaimPendingAllocation(uid types.UID, forceRemove bool) bool {
	deleted := t.ResourceClaimTracker.MaybeRemoveClaimPendingAllocation(uid, forceRemove)
	if deleted && t.observer != nil {
		t.observer.PendingAllocationRemoved(uid)
	}
	return deleted
}

func (t *claimTracker) AssumeClaimAfterAPICall(claim *resourceapi.ResourceClaim) error {
	if err := t.ResourceClaimTracker.AssumeClaimAfterAPICall(claim); err != nil {
		return err
	}
	if t.observer != nil {
		t.observer.Assumed(claim)
	}
	return nil
}

func (t *claimTracker) AssumedClaimRestore(namespace, name string) {
	t.ResourceClaimTracker.AssumedClaimRestore(namespace, name)
	if t.observer != nil {
		t.observer.AssumeRestored(namespace, name)
	}
}
