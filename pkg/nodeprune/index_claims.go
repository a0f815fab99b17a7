package nodeprune

import (
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// claimEntry is the assume cache's entry for a claim: the informer's
// version it accepted, and the version that counts (assumed, or that).
type claimEntry struct {
	api, latest *resourceapi.ResourceClaim
}

func claimKey(namespace, name string) string { return namespace + "/" + name }

// SetClaim is the informer's version of a claim. As in the assume cache,
// a version not newer than the one that counts is ignored.
func (x *Index) SetClaim(claim *resourceapi.ResourceClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := claimKey(claim.Namespace, claim.Name)
	var old *resourceapi.ResourceClaim
	if e := x.claims[key]; e != nil {
		if !newerVersion(claim, e.latest) {
			return
		}
		old = e.latest
	}
	x.claims[key] = &claimEntry{api: claim, latest: claim}
	x.changedLocked(old, claim)
}

// DeleteClaim forgets a claim, an assumed version too, as the assume cache
// does.
func (x *Index) DeleteClaim(claim *resourceapi.ResourceClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := claimKey(claim.Namespace, claim.Name)
	if e := x.claims[key]; e != nil {
		delete(x.claims, key)
		x.changedLocked(e.latest, nil)
	}
}

// Assumed is the version the scheduler wrote, which counts until the
// informer has a newer one. The assume cache only assumes a claim it has
// (the scheduler's own write of a claim it read); one the index has not
// been told of yet waits for the informer, and the check covers the gap.
func (x *Index) Assumed(claim *resourceapi.ResourceClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.claims[claimKey(claim.Namespace, claim.Name)]
	if e == nil || newerVersion(e.latest, claim) {
		return
	}
	old := e.latest
	e.latest = claim
	x.changedLocked(old, claim)
}

// AssumeRestored makes the informer's version count again.
func (x *Index) AssumeRestored(namespace, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.claims[claimKey(namespace, name)]
	if e == nil || e.latest == e.api {
		return
	}
	old := e.latest
	e.latest = e.api
	x.changedLocked(old, e.api)
}

// changedLocked follows a claim from one counted version to the next as
// upstream's allocatedDevices does: a version that gains an allocation
// adds its devices, one that loses it removes the old version's; from one
// allocation to another nothing changes (an allocation is immutable).
func (x *Index) changedLocked(old, claim *resourceapi.ResourceClaim) {
	wasAllocated := old != nil && old.Status.Allocation != nil
	isAllocated := claim != nil && claim.Status.Allocation != nil
	switch {
	case !wasAllocated && isAllocated:
		for _, id := range x.devicesOf(claim) {
			before := x.isHeld(id)
			x.allocated.Insert(id)
			x.heldChangedLocked(id, before)
		}
	case wasAllocated && !isAllocated:
		for _, id := range x.devicesOf(old) {
			before := x.isHeld(id)
			x.allocated.Delete(id)
			x.heldChangedLocked(id, before)
		}
	}
}

// PendingAllocation records an allocation in flight.
func (x *Index) PendingAllocation(claim *resourceapi.ResourceClaim) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.pending[claim.UID]
	devices := x.devicesOf(claim)
	x.pending[claim.UID] = devices
	x.pendLocked(devices, +1)
	x.pendLocked(old, -1)
}

// PendingAllocationRemoved forgets an allocation in flight.
func (x *Index) PendingAllocationRemoved(uid types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.pendLocked(x.pending[uid], -1)
	delete(x.pending, uid)
}

func (x *Index) pendLocked(devices []structured.DeviceID, delta int) {
	for _, id := range devices {
		before := x.isHeld(id)
		if x.pendingOn[id] += delta; x.pendingOn[id] <= 0 {
			delete(x.pendingOn, id)
		}
		x.heldChangedLocked(id, before)
	}
}

// forgetPendingLocked drops the in-flight allocations the claim tracker no
// longer holds. The decorator reports a removal and another profile's new
// share of the same allocation in an order it cannot fix, so an entry can
// outlive upstream's; the check then fails, and this heals it.
func (x *Index) forgetPendingLocked(inFlight func(types.UID) bool) {
	for uid, devices := range x.pending {
		if !inFlight(uid) {
			x.pendLocked(devices, -1)
			delete(x.pending, uid)
		}
	}
}

// newerVersion reports whether a's resource version is past b's, as the
// assume cache compares them (an unparsable one is not newer).
func newerVersion(a, b *resourceapi.ResourceClaim) bool {
	av, aerr := strconv.ParseInt(a.ResourceVersion, 10, 64)
	bv, berr := strconv.ParseInt(b.ResourceVersion, 10, 64)
	return aerr == nil && berr == nil && av > bv
}

// devicesOf are the devices a claim holds as the claim tracker counts them.
func (x *Index) devicesOf(claim *resourceapi.ResourceClaim) []structured.DeviceID {
	if claim == nil || claim.Status.Allocation == nil {
		return nil
	}
	var devices []structured.DeviceID
	for _, result := range claim.Status.Allocation.Devices.Results {
		if ptr.Deref(result.AdminAccess, false) || (x.sharesApart && result.ShareID != nil) {
			continue
		}
		devices = append(devices, structured.MakeDeviceID(result.Driver, result.Pool, result.Device))
	}
	return devices
}

func (x *Index) isHeld(id structured.DeviceID) bool {
	return x.allocated.Has(id) || x.pendingOn[id] > 0
}

// heldChangedLocked updates the sum and the slices when a device's being
// held changed from before.
func (x *Index) heldChangedLocked(id structured.DeviceID, before bool) {
	now := x.isHeld(id)
	switch {
	case now && !before:
		x.sum += x.hash(id)
		x.held++
		for _, e := range x.byDevice[id] {
			x.countLocked(e, +1)
		}
	case before && !now:
		x.sum -= x.hash(id)
		x.held--
		for _, e := range x.byDevice[id] {
			x.countLocked(e, -1)
		}
	}
}
