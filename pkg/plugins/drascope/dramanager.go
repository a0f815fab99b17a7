package drascope

import (
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/gangpreempt"
	"github.com/drascope/drascope/pkg/releasehold"
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
type inFlightObserver interface {
	PendingAllocation(claim *resourceapi.ResourceClaim)
	PendingAllocationRemoved(uid types.UID)
	Assumed(claim *resourceapi.ResourceClaim)
	AssumeRestored(namespace, name string)
}

// observers tell each of several observers, in order.
type observers []inFlightObserver

func (o observers) PendingAllocation(claim *resourceapi.ResourceClaim) {
	for _, each := range o {
		each.PendingAllocation(claim)
	}
}

func (o observers) PendingAllocationRemoved(uid types.UID) {
	for _, each := range o {
		each.PendingAllocationRemoved(uid)
	}
}

func (o observers) Assumed(claim *resourceapi.ResourceClaim) {
	for _, each := range o {
		each.Assumed(claim)
	}
}

func (o observers) AssumeRestored(namespace, name string) {
	for _, each := range o {
		each.AssumeRestored(namespace, name)
	}
}

// Withheld adds devices that must not be handed out to a set of devices in
// use. It runs on the scheduling path: it must only add and return.
type Withheld interface {
	InsertUnhealthy(inUse sets.Set[structured.DeviceID]) int
}

// draManager decorates the scheduler's SharedDRAManager. The manager it
// wraps is shared by every profile, so in-flight allocations of one profile
// are seen by the others and no device is handed out twice within one
// scheduler process; the decorator reports this profile's in-flight
// allocations to an observer (the pool side cache), and adds the devices
// this profile withholds (Unhealthy ones) to what the allocator treats as
// in use.
type draManager struct {
	fwk.SharedDRAManager
	claims claimTracker
	// countersIgnored is set while upstream's PreFilter runs for a pod
	// whose every unallocated request asks for admin access: the listing
	// then hands out slices without counter consumption
	// (adminaccess.WithZeroCounterConsumption). Scheduling cycles run one
	// at a time, and only PreFilter builds the allocator from the slices;
	// upstream's other reads of them (node-allocatable resources, in
	// PreFilter and Filter) look up devices' NodeAllocatableResources,
	// never counters.
	countersIgnored atomic.Bool
	// capture is what upstream's PreFilter built the cycle's allocator
	// from (capture.go): node pruning and preemption's dry runs read it.
	capture cycleCapture
	// bestFit orders the listed slices (deviceChoice: BestFit); nil keeps
	// the driver's order.
	bestFit *bestFit
	// steering limits the listed slices to a planned gang member's
	// devices (podgrouppostfilter.go).
	steering steering
	// served, while set, answers upstream's PreFilter in place of the
	// manager it wraps: what pruning first gathered (prune.go).
	served atomic.Pointer[servedView]
}

// newDRAManager decorates the scheduler's shared DRA manager for one
// profile; observer and withheld may be nil. holds are the scheduler's,
// shared by every profile; nil gives the profile holds of its own (tests).
func newDRAManager(inner fwk.SharedDRAManager, observer inFlightObserver, withheld Withheld, holds *releasehold.Holds) *draManager {
	if holds == nil {
		holds = &releasehold.Holds{}
	}
	m := &draManager{SharedDRAManager: inner}
	m.claims = claimTracker{ResourceClaimTracker: inner.ResourceClaims(), observer: observer, withheld: withheld, holds: holds, capture: &m.capture, served: &m.served}
	return m
}

func (m *draManager) ResourceClaims() fwk.ResourceClaimTracker {
	return &m.claims
}

// claimTracker forwards to the scheduler's claim tracker, reports
// successful in-flight changes to the observer, and adds withheld devices to
// the allocated state. Claims themselves are never changed, so a withheld
// device that a claim already holds stays allocated to it.
type claimTracker struct {
	fwk.ResourceClaimTracker
	observer inFlightObserver
	withheld Withheld
	// capture receives the in-use set handed to upstream.
	capture *cycleCapture
	// served: draManager.served.
	served *atomic.Pointer[servedView]
	// holds keep released allocations in use until their fate is known
	// (pkg/releasehold), for every profile of the scheduler.
	holds *releasehold.Holds
	// freeing are the victims' devices of a pod-group preemption's dry
	// run while a member's PreFilter runs (pkg/gangpreempt).
	freeing atomic.Pointer[gangpreempt.DryRun]
	// pending are the allocations this profile signalled and has not
	// removed, by the UID upstream signalled them under; preemption's
	// release view holds them (victims.View.InFlight).
	pending pendingAllocations
}

// pendingAllocations are in-flight allocations by UID.
type pendingAllocations struct {
	mu      sync.Mutex
	byClaim map[types.UID]*resourceapi.AllocationResult
	// writing are those PreBind may have written (reserve.go).
	writing sets.Set[types.UID]
}

// mayBeFreedSilently reports whether devices are held (by any profile),
// or in flight for this profile (and so held if their write fails): a pod
// refused now may find them free when a hold's check ends it, which no
// informer event announces (releasehold). Another DRAScope profile's
// in-flight allocations are not seen: upstream's shared tracker does not
// tell whether it has any, and two DRAScope profiles are rare.
func (t *claimTracker) mayBeFreedSilently() bool {
	t.pending.mu.Lock()
	inFlight := len(t.pending.byClaim) > 0
	t.pending.mu.Unlock()
	return inFlight || t.holds.Holding()
}

// inFlight returns the allocations this profile signalled that upstream's
// shared tracker still has in flight. An entry upstream no longer holds
// (another profile sharing the claim removed it, or a sharer's removal
// came between this profile's signal and its record) is dropped here, so
// the map never keeps devices in use for ever.
func (t *claimTracker) inFlight() []*resourceapi.AllocationResult {
	t.pending.mu.Lock()
	defer t.pending.mu.Unlock()
	var allocations []*resourceapi.AllocationResult
	for uid, allocation := range t.pending.byClaim {
		if t.ResourceClaimTracker.GetPendingAllocation(uid) != allocation {
			delete(t.pending.byClaim, uid)
			continue
		}
		allocations = append(allocations, allocation)
	}
	return allocations
}

// inUseSeen is the allocated state as handed to upstream's allocator, and
// which of its devices are in use for no claim the tracker shows: withheld
// ones (which node pruning counts apart) and those a release hold keeps
// (which a preemption dry run must not free with a victim's claim).
type inUseSeen struct {
	state          structured.AllocatedState
	withheld, kept sets.Set[structured.DeviceID]
}

// addWithheld adds the held and the withheld devices to state (without,
// in a pod-group preemption's dry run, the victims' devices) and
// remembers it; shares says the allocator tracks shared devices
// (DRAConsumableCapacity), so that a held share is added as one.
func (t *claimTracker) addWithheld(state structured.AllocatedState, shares bool) {
	t.withoutFreed(state, shares)
	kept := t.holds.InsertHeld(state, shares, func(namespace, name string) (string, bool) {
		claim, err := t.ResourceClaimTracker.Get(namespace, name)
		if err != nil {
			return "", false
		}
		return claim.ResourceVersion, true
	})
	withheld := sets.New[structured.DeviceID]()
	if t.withheld != nil {
		t.withheld.InsertUnhealthy(withheld)
	}
	kept = kept.Union(withheld)
	for id := range kept {
		state.AllocatedDevices.Insert(id)
	}
	t.capture.sawInUse(&inUseSeen{state: state, withheld: withheld, kept: kept})
}

// servedInUse is the in-use state being served (nil: none), which the
// capture then holds again, as if gathered afresh.
func (t *claimTracker) servedInUse() *inUseSeen {
	if t.served == nil {
		return nil
	}
	served := t.served.Load()
	if served == nil {
		return nil
	}
	t.capture.sawInUse(served.seen)
	return served.seen
}

// ListAllAllocatedDevices is what upstream's PreFilter hands the allocator
// as in use (without consumable capacity). The set is a fresh copy for
// each call, so adding to it changes nothing else; while pruning first
// serves upstream, it is the set pruning gathered, which nothing changes
// after.
func (t *claimTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	if seen := t.servedInUse(); seen != nil {
		return seen.state.AllocatedDevices, nil
	}
	allocated, err := t.ResourceClaimTracker.ListAllAllocatedDevices()
	if err == nil && allocated != nil {
		t.addWithheld(structured.AllocatedState{AllocatedDevices: allocated}, false)
	}
	return allocated, err
}

// GatherAllocatedState is ListAllAllocatedDevices with consumable capacity.
// A device in AllocatedDevices is in use for every request, shared or not.
func (t *claimTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	if seen := t.servedInUse(); seen != nil {
		state := seen.state
		return &state, nil
	}
	state, err := t.ResourceClaimTracker.GatherAllocatedState()
	if err == nil && state != nil {
		if state.AllocatedDevices == nil {
			state.AllocatedDevices = sets.New[structured.DeviceID]()
		}
		t.addWithheld(*state, true)
	}
	return state, err
}

// SignalClaimPendingAllocation reports the pending allocation upstream
// recorded, and only when it recorded one: for a claim its assume cache already has
// allocated, upstream succeeds without an in-flight entry (and a later
// MaybeRemoveClaimPendingAllocation removes nothing), and the side cache
// would show the device this cycle picked, for the claim's whole life,
// while the one the claim holds showed free.
func (t *claimTracker) SignalClaimPendingAllocation(uid types.UID, allocated *resourceapi.ResourceClaim) error {
	if err := t.ResourceClaimTracker.SignalClaimPendingAllocation(uid, allocated); err != nil {
		return err
	}
	recorded := t.ResourceClaimTracker.GetPendingAllocation(uid)
	if recorded == nil {
		return nil
	}
	t.pending.mu.Lock()
	if t.pending.byClaim == nil {
		t.pending.byClaim = map[types.UID]*resourceapi.AllocationResult{}
	}
	if _, known := t.pending.byClaim[uid]; !known {
		// A new allocation: nothing of it was written yet, whatever an
		// earlier allocation of the same claim went through.
		t.pending.writing.Delete(uid)
	}
	t.pending.byClaim[uid] = recorded
	t.pending.mu.Unlock()
	if t.observer == nil {
		return nil
	}
	if recorded != allocated.Status.Allocation {
		// A share of an allocation already in flight: upstream keeps the
		// first one, and so must what the side cache shows.
		allocated = allocated.DeepCopy()
		allocated.Status.Allocation = recorded
	}
	t.observer.PendingAllocation(allocated)
	return nil
}

// MaybeRemoveClaimPendingAllocation without forceRemove is Unreserve's:
// after PreBind began, the allocation may or may not have been written, so
// its devices are held (pkg/releasehold; reserve.go). PreBind's, after a successful
// write, forces.
func (t *claimTracker) MaybeRemoveClaimPendingAllocation(uid types.UID, forceRemove bool) bool {
	pending := t.ResourceClaimTracker.GetPendingAllocation(uid)
	deleted := t.ResourceClaimTracker.MaybeRemoveClaimPendingAllocation(uid, forceRemove)
	written := false
	if deleted {
		t.pending.mu.Lock()
		delete(t.pending.byClaim, uid)
		written = t.pending.writing.Has(uid)
		t.pending.writing.Delete(uid)
		t.pending.mu.Unlock()
	}
	// Only PreBind writes allocations: one dropped before PreBind began
	// (a scheduling cycle undone, as a failed gang's is) cannot be in the
	// API, and holding it would keep its devices from the gang's retry.
	if deleted && !forceRemove && pending != nil && written {
		t.holds.Released(uid, pending)
	}
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
	if claim, err := t.ResourceClaimTracker.Get(namespace, name); err == nil {
		t.holds.Restored(claim)
	}
	if t.observer != nil {
		t.observer.AssumeRestored(namespace, name)
	}
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

// withoutFreed takes out of an in-use set, in a pod-group preemption's dry
// run, the devices the victims free (gangpreempt.DryRun.WithoutFreed),
// except those in flight: another member of the dry run took them.
func (t *claimTracker) withoutFreed(state structured.AllocatedState, shares bool) {
	if p := t.freeing.Load(); p != nil {
		p.WithoutFreed(state.AllocatedDevices, t.inFlightDevices(shares))
	}
}

// inFlightDevices are the devices this profile's in-flight allocations
// hold whole.
func (t *claimTracker) inFlightDevices(shares bool) sets.Set[structured.DeviceID] {
	taken := sets.New[structured.DeviceID]()
	for _, allocation := range t.inFlight() {
		allocated.Each(allocation, shares, allocated.Visitor{
			Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { taken.Insert(id) },
		})
	}
	return taken
}
