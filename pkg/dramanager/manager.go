// Package dramanager is drascope's decorator of the scheduler's
// SharedDRAManager: the one seam through which drascope sees, and may add
// to, what upstream's DynamicResources plugin hands its allocator. It
// reports a profile's in-flight allocations to observers, adds held and
// withheld devices to the in-use set, orders (BestFit), narrows (gang
// plans) or rewrites (admin access, pod-group dry runs) the slices listed,
// serves what pruning gathered in place of fresh answers, and captures what
// upstream's PreFilter built its allocator from. The plugin
// (pkg/plugins/drascope) sets each of these for one scheduling cycle.
package dramanager

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

// Observer is told about allocations the scheduler makes before the
// informers see them. Calls come from the scheduling path: they must only
// record and return.
type Observer interface {
	PendingAllocation(claim *resourceapi.ResourceClaim)
	PendingAllocationRemoved(uid types.UID)
	Assumed(claim *resourceapi.ResourceClaim)
	AssumeRestored(namespace, name string)
}

// Observers tell each of several observers, in order.
type Observers []Observer

func (o Observers) PendingAllocation(claim *resourceapi.ResourceClaim) {
	for _, each := range o {
		each.PendingAllocation(claim)
	}
}

func (o Observers) PendingAllocationRemoved(uid types.UID) {
	for _, each := range o {
		each.PendingAllocationRemoved(uid)
	}
}

func (o Observers) Assumed(claim *resourceapi.ResourceClaim) {
	for _, each := range o {
		each.Assumed(claim)
	}
}

func (o Observers) AssumeRestored(namespace, name string) {
	for _, each := range o {
		each.AssumeRestored(namespace, name)
	}
}

// Withheld adds devices that must not be handed out to a set of devices in
// use. It runs on the scheduling path: it must only add and return.
type Withheld interface {
	InsertUnhealthy(inUse sets.Set[structured.DeviceID]) int
}

// Manager decorates the scheduler's SharedDRAManager. The manager it
// wraps is shared by every profile, so in-flight allocations of one profile
// are seen by the others and no device is handed out twice within one
// scheduler process; the decorator reports this profile's in-flight
// allocations to an observer (the pool side cache), and adds the devices
// this profile withholds (Unhealthy ones) to what the allocator treats as
// in use.
type Manager struct {
	fwk.SharedDRAManager
	claims ClaimTracker
	// countersIgnored: IgnoreCounters.
	countersIgnored atomic.Bool
	// capture is what upstream's PreFilter built the cycle's allocator
	// from (capture.go): node pruning and preemption's dry runs read it.
	capture Capture
	// bestFit orders the listed slices (deviceChoice: BestFit,
	// OrderBestFit); nil keeps the driver's order.
	bestFit *bestFit
	// steering limits the listed slices to a planned gang member's
	// devices (Steer).
	steering steering
	// served, while set, answers upstream's PreFilter in place of the
	// manager it wraps: what pruning first gathered (Serve).
	served atomic.Pointer[Served]
}

// New decorates the scheduler's shared DRA manager for one
// profile; observer and withheld may be nil. holds are the scheduler's,
// shared by every profile; nil gives the profile holds of its own (tests).
func New(inner fwk.SharedDRAManager, observer Observer, withheld Withheld, holds *releasehold.Holds) *Manager {
	if holds == nil {
		holds = &releasehold.Holds{}
	}
	m := &Manager{SharedDRAManager: inner}
	m.claims = ClaimTracker{ResourceClaimTracker: inner.ResourceClaims(), observer: observer, withheld: withheld, holds: holds, capture: &m.capture, served: &m.served}
	return m
}

func (m *Manager) ResourceClaims() fwk.ResourceClaimTracker {
	return &m.claims
}

// Claims is the decorated claim tracker, with drascope's views of what is
// in flight.
func (m *Manager) Claims() *ClaimTracker {
	return &m.claims
}

// What follows sets, for one scheduling cycle, how the manager answers.
// Scheduling cycles run one at a time, so one value of each per profile
// serves; each setter returns the func that unsets it.

// OrderBestFit makes the manager list slices in BestFit order
// (deviceChoice: BestFit) whenever Listing is on; set once, at start.
func (m *Manager) OrderBestFit() {
	m.bestFit = &bestFit{}
}

// Want tells BestFit how many devices the cycle's pod asks for
// (devicechoice.Wanted).
func (m *Manager) Want(devices int) {
	if m.bestFit != nil {
		m.bestFit.want.Store(int32(devices))
	}
}

// ListForAllocator says that the slices listed from now until done is
// called build upstream's allocator, so BestFit orders them: upstream's
// PreFilter runs in between (Filter's node-allocatable lookups list too,
// and need no order).
func (m *Manager) ListForAllocator() (done func()) {
	if m.bestFit == nil {
		return func() {}
	}
	m.bestFit.active.Store(true)
	return func() { m.bestFit.active.Store(false) }
}

// IgnoreCounters lists every device as consuming zero of each counter
// (adminaccess.WithZeroCounterConsumption), for a pod whose every
// unallocated request asks for admin access. Only PreFilter builds the
// allocator from the slices; upstream's other reads of them
// (node-allocatable resources, in PreFilter and Filter) look up devices'
// NodeAllocatableResources, never counters.
func (m *Manager) IgnoreCounters() (restore func()) {
	m.countersIgnored.Store(true)
	return func() { m.countersIgnored.Store(false) }
}

// Steer lists, of the free devices, only those planned for a gang member
// (gangplan.OnlyPlanned).
func (m *Manager) Steer(planned *sets.Set[structured.DeviceID]) (stop func()) {
	m.steering.allowed.Store(planned)
	return func() { m.steering.allowed.Store(nil) }
}

// Hide lists the slices without the devices, where they are free, for the
// cycle's pod: those a DeviceQuota of its namespace could not take
// (devicequota.Steering). Unlike withheld devices, they are not added to
// the in-use set: the allocator would count the shared counters they
// consume as taken, and so refuse the partitions the quota can take.
func (m *Manager) Hide(devices sets.Set[structured.DeviceID]) (stop func()) {
	m.steering.hidden.Store(&devices)
	return func() { m.steering.hidden.Store(nil) }
}

// Free hands the allocator, in a pod-group preemption's dry run, the
// victims' devices as free (gangpreempt.DryRun.WithoutFreed) and lists them
// after the others.
func (m *Manager) Free(dryRun *gangpreempt.DryRun) (stop func()) {
	m.claims.freeing.Store(dryRun)
	return func() { m.claims.freeing.Store(nil) }
}

// Serve answers upstream's PreFilter with served in place of fresh
// answers: the in-use state and the slices pruning gathered.
func (m *Manager) Serve(served *Served) (stop func()) {
	m.served.Store(served)
	return func() { m.served.Store(nil) }
}

// Serving reports whether Serve is on.
func (m *Manager) Serving() bool {
	return m.served.Load() != nil
}

// Served is what the manager hands upstream's PreFilter while Serve is
// on: the in-use state, with what drascope added to it, and the slices.
type Served struct {
	InUse  *InUse
	Slices []*resourceapi.ResourceSlice
}

// BeginCapture forgets what an earlier cycle captured: call it right
// before upstream's PreFilter (or before gathering what it would be
// handed).
func (m *Manager) BeginCapture() {
	m.capture.begin()
}

// TakeCapture returns what upstream's PreFilter built its allocator from,
// once: ok is false when it built none (nothing to allocate, or it failed
// before).
func (m *Manager) TakeCapture() (inUse *InUse, slices []*resourceapi.ResourceSlice, ok bool) {
	return m.capture.take()
}

// ClaimTracker forwards to the scheduler's claim tracker, reports
// successful in-flight changes to the observer, and adds withheld devices to
// the allocated state. Claims themselves are never changed, so a withheld
// device that a claim already holds stays allocated to it.
type ClaimTracker struct {
	fwk.ResourceClaimTracker
	observer Observer
	withheld Withheld
	// capture receives the in-use set handed to upstream.
	capture *Capture
	// served: Manager.served.
	served *atomic.Pointer[Served]
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
	// writing are those PreBind may have written (StartWriting, from the plugin's PreBind).
	writing sets.Set[types.UID]
}

// MayBeFreedSilently reports whether devices are held (by any profile),
// or in flight for this profile (and so held if their write fails): a pod
// refused now may find them free when a hold's check ends it, which no
// informer event announces (releasehold). Another DRAScope profile's
// in-flight allocations are not seen: upstream's shared tracker does not
// tell whether it has any, and two DRAScope profiles are rare.
func (t *ClaimTracker) MayBeFreedSilently() bool {
	t.pending.mu.Lock()
	inFlight := len(t.pending.byClaim) > 0
	t.pending.mu.Unlock()
	return inFlight || t.holds.Holding()
}

// InFlight returns the allocations this profile signalled that upstream's
// shared tracker still has in flight. An entry upstream no longer holds
// (another profile sharing the claim removed it, or a sharer's removal
// came between this profile's signal and its record) is dropped here, so
// the map never keeps devices in use for ever.
func (t *ClaimTracker) InFlight() []*resourceapi.AllocationResult {
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

// InUse is the allocated state as handed to upstream's allocator, and
// which of its devices are in use for no claim the tracker shows: withheld
// ones (which node pruning counts apart) and those a release hold keeps
// (which a preemption dry run must not free with a victim's claim).
type InUse struct {
	State          structured.AllocatedState
	Withheld, Kept sets.Set[structured.DeviceID]
}

// addWithheld adds the held and the withheld devices to state (without,
// in a pod-group preemption's dry run, the victims' devices) and
// remembers it; shares says the allocator tracks shared devices
// (DRAConsumableCapacity), so that a held share is added as one.
func (t *ClaimTracker) addWithheld(state structured.AllocatedState, shares bool) {
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
	t.capture.sawInUse(&InUse{State: state, Withheld: withheld, Kept: kept})
}

// servedInUse is the in-use state being served (nil: none), which the
// capture then holds again, as if gathered afresh.
func (t *ClaimTracker) servedInUse() *InUse {
	if t.served == nil {
		return nil
	}
	served := t.served.Load()
	if served == nil {
		return nil
	}
	t.capture.sawInUse(served.InUse)
	return served.InUse
}

// ListAllAllocatedDevices is what upstream's PreFilter hands the allocator
// as in use (without consumable capacity). The set is a fresh copy for
// each call, so adding to it changes nothing else; while pruning first
// serves upstream, it is the set pruning gathered, which nothing changes
// after.
func (t *ClaimTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	if seen := t.servedInUse(); seen != nil {
		return seen.State.AllocatedDevices, nil
	}
	allocated, err := t.ResourceClaimTracker.ListAllAllocatedDevices()
	if err == nil && allocated != nil {
		t.addWithheld(structured.AllocatedState{AllocatedDevices: allocated}, false)
	}
	return allocated, err
}

// GatherAllocatedState is ListAllAllocatedDevices with consumable capacity.
// A device in AllocatedDevices is in use for every request, shared or not.
func (t *ClaimTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	if seen := t.servedInUse(); seen != nil {
		state := seen.State
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
func (t *ClaimTracker) SignalClaimPendingAllocation(uid types.UID, allocated *resourceapi.ResourceClaim) error {
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
// its devices are held (pkg/releasehold; the plugin's reserve.go). PreBind's, after a successful
// write, forces.
func (t *ClaimTracker) MaybeRemoveClaimPendingAllocation(uid types.UID, forceRemove bool) bool {
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

func (t *ClaimTracker) AssumeClaimAfterAPICall(claim *resourceapi.ResourceClaim) error {
	if err := t.ResourceClaimTracker.AssumeClaimAfterAPICall(claim); err != nil {
		return err
	}
	if t.observer != nil {
		t.observer.Assumed(claim)
	}
	return nil
}

func (t *ClaimTracker) AssumedClaimRestore(namespace, name string) {
	t.ResourceClaimTracker.AssumedClaimRestore(namespace, name)
	if claim, err := t.ResourceClaimTracker.Get(namespace, name); err == nil {
		t.holds.Restored(claim)
	}
	if t.observer != nil {
		t.observer.AssumeRestored(namespace, name)
	}
}

// PendingUIDs are the UIDs of this profile's in-flight allocations.
func (t *ClaimTracker) PendingUIDs() sets.Set[types.UID] {
	t.pending.mu.Lock()
	defer t.pending.mu.Unlock()
	uids := sets.New[types.UID]()
	for uid := range t.pending.byClaim {
		uids.Insert(uid)
	}
	return uids
}

// StartWriting marks in-flight allocations as possibly written from now on.
func (t *ClaimTracker) StartWriting(uids []types.UID) {
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
func (t *ClaimTracker) withoutFreed(state structured.AllocatedState, shares bool) {
	if p := t.freeing.Load(); p != nil {
		p.WithoutFreed(state.AllocatedDevices, t.InFlightDevices(shares))
	}
}

// InFlightDevices are the devices this profile's in-flight allocations
// hold whole.
func (t *ClaimTracker) InFlightDevices(shares bool) sets.Set[structured.DeviceID] {
	taken := sets.New[structured.DeviceID]()
	for _, allocation := range t.InFlight() {
		allocated.Each(allocation, shares, allocated.Visitor{
			Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { taken.Insert(id) },
		})
	}
	return taken
}
