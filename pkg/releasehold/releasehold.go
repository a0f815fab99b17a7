// Package releasehold keeps devices in use whose allocation the scheduler
// gave up on without knowing whether the API has it. One set of holds
// serves every DRAScope profile of a scheduler: the in-flight allocations
// it protects are scheduler-wide (upstream's shared DRA manager), so a
// hold made after one profile's failed write must keep the device from
// every profile's allocator.
package releasehold

import (
	"context"
	"math"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/pkg/allocated"
)

// Upstream's PreBind writes a claim's allocation; when the write fails, the
// pod is unreserved and the allocation leaves the in-flight set, so its
// devices look free. But a write can fail after the apiserver committed it
// (the connection reset by an apiserver restart, a timeout): the claim is
// then allocated in the API, and until the informer delivers that, the
// scheduler hands the same device to another claim. TestAPIServerRestartMidBurst
// caught exactly that: one GPU allocated to two claims.
//
// So when Unreserve drops an in-flight allocation, its devices stay in
// use until the scheduler's view of the claim moves past the version it
// had (the informer delivered what the API holds), or a read from the API
// shows the claim at that version still (the write never happened).

// hold is an allocation Unreserve released, held until its fate is known.
type hold struct {
	namespace, name, resourceVersion string
	devices                          heldDevices
	// free is set when the API showed the claim at resourceVersion (the
	// released allocation was never written) or showed it gone.
	free bool
}

// VersionReader reads a claim's resource version from the API (a quorum
// read).
type VersionReader func(ctx context.Context, namespace, name string) (string, error)

// FromAPI reads a claim's resource version with a quorum read; a claim that
// is gone reads as no version.
func FromAPI(client kubernetes.Interface) VersionReader {
	return func(ctx context.Context, namespace, name string) (string, error) {
		claim, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return claim.ResourceVersion, nil
	}
}

// Holds are the scheduler's release holds. The zero value holds until the
// scheduler's view of a claim moves on; Start adds checks against the API.
type Holds struct {
	mu sync.Mutex
	// released are allocations MaybeRemoveClaimPendingAllocation dropped,
	// by claim, until AssumedClaimRestore names the claim, which upstream's
	// Unreserve does right after for a user's claim. For a claim of
	// DRA-backed extended resources it removes the allocation under a
	// temporary UID that nothing names again: such entries are dropped
	// once older than releasedFor.
	released map[types.UID]released
	held     map[types.UID]*hold
	// Clock, for tests; the real clock when nil.
	Clock clock.PassiveClock
	// read checks a hold against the API; nil holds until the view moves.
	read VersionReader
	ctx  context.Context
	// freed is called when a check frees a hold's devices.
	freed func(klog.Logger)
}

// Start makes every later hold be checked against the API with read, until
// ctx ends. freed, when not nil, is called each time a check finds a held
// allocation free (never written, or its claim gone): no informer event
// announces that, since the scheduler's view of the claim does not change,
// so the pods refused while it was held must be retried by the caller.
func (h *Holds) Start(ctx context.Context, read VersionReader, freed func(klog.Logger)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctx, h.read, h.freed = ctx, read, freed
}

// Holding reports whether any device is held, or may be as soon as
// upstream's Unreserve names the claim it released.
func (h *Holds) Holding() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetOldReleasedLocked(h.now())
	return len(h.held) > 0 || len(h.released) > 0
}

// forgetOldReleasedLocked drops released allocations nothing named within
// releasedFor (an extended-resource claim's temporary UID).
func (h *Holds) forgetOldReleasedLocked(now time.Time) {
	for uid, r := range h.released {
		if now.Sub(r.at) > releasedFor {
			delete(h.released, uid)
		}
	}
}

// ViewChanged ends the hold of a claim whose informer view moved past the
// held version, or that is gone, and reports its devices freed: the
// informer's event does not retry the pods refused for them, since
// upstream's hint ignores a change of another pod's claim that removes no
// allocation (a failed write may have added only the finalizer), and the
// deletion of a claim without one. Call it from the claim informer's
// update and delete events.
func (h *Holds) ViewChanged(claim *resourceapi.ResourceClaim, gone bool) {
	h.mu.Lock()
	hold, ok := h.held[claim.UID]
	if !ok || (!gone && claim.ResourceVersion == hold.resourceVersion) {
		h.mu.Unlock()
		return
	}
	delete(h.held, claim.UID)
	reported, freed, ctx := hold.free, h.freed, h.ctx
	h.mu.Unlock()
	if reported || freed == nil || ctx == nil {
		return
	}
	logger := klog.FromContext(ctx)
	logger.V(4).Info("Released allocation's claim changed in the scheduler's view, its hold ends", "claim", klog.KObj(claim), "gone", gone)
	freed(logger)
}

// released is an allocation Unreserve dropped, and when.
type released struct {
	devices heldDevices
	at      time.Time
}

// heldDevices are what an allocation holds, as upstream's claim tracker
// counts it: nothing for an admin-access result; for a result with a
// ShareID (DRAConsumableCapacity), its share and the capacity it consumes
// where the allocator tracks shares, else the whole device; the whole
// device for any other result.
type heldDevices struct {
	dedicated []structured.DeviceID
	shares    []structured.SharedDeviceID
	consumed  []structured.DeviceConsumedCapacity
}

func (d heldDevices) empty() bool { return len(d.dedicated) == 0 && len(d.shares) == 0 }

// releasedFor bounds how long a released allocation waits for the claim to
// be named: upstream names it in the same Unreserve.
const releasedFor = time.Minute

func devicesOf(allocation *resourceapi.AllocationResult) heldDevices {
	var held heldDevices
	// Shares are kept as shares; InsertHeld turns them into whole devices
	// where the allocator does not track shares.
	allocated.Each(allocation, true, allocated.Visitor{
		Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) {
			held.dedicated = append(held.dedicated, id)
		},
		Share: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity) {
			held.shares = append(held.shares, id)
			if consumed != nil {
				held.consumed = append(held.consumed, *consumed)
			}
		},
	})
	return held
}

func (h *Holds) now() time.Time {
	if h.Clock == nil {
		return time.Now()
	}
	return h.Clock.Now()
}

// Sizes reports how many released allocations and holds are kept, for
// tests that check nothing leaks.
func (h *Holds) Sizes() (released, held int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.released), len(h.held)
}

// Released records the devices of an in-flight allocation Unreserve
// dropped.
func (h *Holds) Released(uid types.UID, allocation *resourceapi.AllocationResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if h.released == nil {
		h.released = map[types.UID]released{}
	}
	h.forgetOldReleasedLocked(now)
	h.released[uid] = released{devices: devicesOf(allocation), at: now}
}

// Restored turns a released allocation into a hold, now that the claim is
// known as the scheduler's view has it, and starts checking it against the
// API.
func (h *Holds) Restored(claim *resourceapi.ResourceClaim) {
	h.mu.Lock()
	r, ok := h.released[claim.UID]
	devices := r.devices
	delete(h.released, claim.UID)
	if !ok || devices.empty() {
		h.mu.Unlock()
		return
	}
	if h.held == nil {
		h.held = map[types.UID]*hold{}
	}
	held := &hold{namespace: claim.Namespace, name: claim.Name, resourceVersion: claim.ResourceVersion, devices: devices}
	h.held[claim.UID] = held
	read, ctx, freed := h.read, h.ctx, h.freed
	h.mu.Unlock()
	if read != nil && ctx != nil {
		go h.check(ctx, read, held, freed)
	}
}

// check reads the claim from the API until it can, with backoff (the
// apiserver may be the reason the write failed), and frees the hold when
// the API still has the version the scheduler saw, or no claim. A claim
// the API has at a newer version keeps its hold until the informer
// delivers that version (InsertHeld): its allocation may be the one
// released.
func (h *Holds) check(ctx context.Context, read VersionReader, hold *hold, freed func(klog.Logger)) {
	// Until it can read, however long the apiserver is away: a hold nobody
	// resolves (a standalone claim whose pod is gone never changes) would
	// keep its devices from every pod.
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 10 * time.Second}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		rv, err := read(ctx, hold.namespace, hold.name)
		if err != nil {
			return false, nil
		}
		if rv != hold.resourceVersion && rv != "" {
			return true, nil
		}
		h.mu.Lock()
		hold.free = true
		h.mu.Unlock()
		logger := klog.FromContext(ctx)
		if rv == "" {
			logger.V(4).Info("Released allocation's claim is gone, its devices are free", "claim", klog.KRef(hold.namespace, hold.name))
		} else {
			logger.V(4).Info("Released allocation was never written, its devices are free", "claim", klog.KRef(hold.namespace, hold.name))
		}
		if freed != nil {
			freed(logger)
		}
		return true, nil
	})
}

// InsertHeld adds the held devices to state as upstream's claim tracker
// counts an allocation, dropping the holds whose fate is known: the claim
// is gone or the view of it moved on (current returns its resource
// version, false when gone), or the API showed the allocation was never
// written or the claim gone. With shares (the allocator tracks DRAConsumableCapacity), a
// shared result adds its share and its consumed capacity, leaving the rest
// of the device to other shares; without, the whole device. It returns the
// devices it added whole.
func (h *Holds) InsertHeld(state structured.AllocatedState, shares bool, current func(namespace, name string) (string, bool)) sets.Set[structured.DeviceID] {
	shares = shares && state.AllocatedSharedDeviceIDs != nil && state.AggregatedCapacity != nil
	whole := sets.New[structured.DeviceID]()
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid, hold := range h.held {
		rv, ok := current(hold.namespace, hold.name)
		if !ok || rv != hold.resourceVersion || hold.free {
			delete(h.held, uid)
			continue
		}
		whole.Insert(hold.devices.dedicated...)
		if !shares {
			for _, share := range hold.devices.shares {
				whole.Insert(share.GetDeviceID())
			}
			continue
		}
		state.AllocatedSharedDeviceIDs.Insert(hold.devices.shares...)
		for _, consumed := range hold.devices.consumed {
			state.AggregatedCapacity.Insert(consumed)
		}
	}
	state.AllocatedDevices.Insert(whole.UnsortedList()...)
	return whole
}
