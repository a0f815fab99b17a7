package dramanager

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/releasehold"
)

// viewTracker is the scheduler's claim tracker as a map: the claim as the
// informer last delivered it, one allocation in flight, nothing else
// allocated.
type viewTracker struct {
	fwk.ResourceClaimTracker
	mu       sync.Mutex
	claim    *resourceapi.ResourceClaim
	inFlight *resourceapi.AllocationResult
}

func (t *viewTracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claim == nil || t.claim.Name != name {
		return nil, fmt.Errorf("claim %s/%s not found", namespace, name)
	}
	return t.claim, nil
}
func (t *viewTracker) GetPendingAllocation(types.UID) *resourceapi.AllocationResult {
	return t.inFlight
}
func (t *viewTracker) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool {
	removed := t.inFlight != nil
	t.inFlight = nil
	return removed
}
func (t *viewTracker) AssumedClaimRestore(string, string) {}
func (t *viewTracker) SignalClaimPendingAllocation(types.UID, *resourceapi.ResourceClaim) error {
	return nil
}
func (t *viewTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	return sets.New[structured.DeviceID](), nil
}

// TestReleasedAllocationsStayInUseUntilTheirFateIsKnown: when Unreserve
// drops an in-flight allocation whose write may have reached the API (an
// apiserver restart reset the connection), its device stays in use until
// the scheduler's view of the claim moves on or the API shows the write
// never happened; an allocation PreBind wrote, or one PreBind never began
// to write, is not held.
func TestReleasedAllocationsStayInUseUntilTheirFateIsKnown(t *testing.T) {
	device := structured.MakeDeviceID("gpu.example.com", "node-1", "gpu-0")
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"},
	}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "1"}}

	// prebind puts the allocation in flight through the decorator and
	// marks it as being written, as Reserve and PreBind do.
	prebind := func(t *testing.T, claims fwk.ResourceClaimTracker) {
		t.Helper()
		allocated := claim.DeepCopy()
		allocated.Status.Allocation = allocation
		if err := claims.SignalClaimPendingAllocation(claim.UID, allocated); err != nil {
			t.Fatal(err)
		}
		claims.(*ClaimTracker).StartWriting([]types.UID{claim.UID})
	}

	// freed counts the holds a check found free: each must retry the
	// pods that waited, since no event announces it.
	var freed atomic.Int32
	setUp := func(read releasehold.VersionReader) (*viewTracker, fwk.ResourceClaimTracker) {
		freed.Store(0)
		view := &viewTracker{claim: claim, inFlight: allocation}
		holds := &releasehold.Holds{}
		holds.Start(context.Background(), read, func(klog.Logger) { freed.Add(1) })
		manager := New(&innerManager2{claims: view}, nil, nil, holds)
		return view, manager.ResourceClaims()
	}
	// released is Unreserve after PreBind began.
	released := func(t *testing.T, claims fwk.ResourceClaimTracker) {
		t.Helper()
		prebind(t, claims)
		claims.MaybeRemoveClaimPendingAllocation(claim.UID, false)
		claims.AssumedClaimRestore(claim.Namespace, claim.Name)
	}
	inUse := func(t *testing.T, claims fwk.ResourceClaimTracker) bool {
		t.Helper()
		set, err := claims.ListAllAllocatedDevices()
		if err != nil {
			t.Fatal(err)
		}
		return set.Has(device)
	}
	apiDown := func(context.Context, string, string) (string, error) { return "", fmt.Errorf("connection refused") }
	t.Run("held until the informer delivers the claim", func(t *testing.T) {
		view, claims := setUp(apiDown)
		released(t, claims)
		if !inUse(t, claims) {
			t.Fatal("the released device is free while the API may hold its allocation")
		}
		view.mu.Lock()
		written := claim.DeepCopy()
		written.ResourceVersion = "2"
		view.claim = written
		view.mu.Unlock()
		if inUse(t, claims) {
			t.Error("the hold outlived a new version of the claim in the scheduler's view")
		}
	})
	for what, version := range map[string]string{"the write never happened": "1", "the claim is gone": ""} {
		t.Run("released once the API shows "+what, func(t *testing.T) {
			_, claims := setUp(func(context.Context, string, string) (string, error) { return version, nil })
			released(t, claims)
			err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return freed.Load() > 0, nil
			})
			if err != nil {
				t.Fatal("the check never reported the hold free: the pods refused while it held would wait for the queue's flush")
			}
			if inUse(t, claims) {
				t.Error("the device stayed in use after the check reported it free")
			}
			if got := freed.Load(); got != 1 {
				t.Errorf("one hold freed %d times", got)
			}
		})
	}
	// The API has the claim at a newer version: perhaps with the released
	// allocation. The hold stays until the informer delivers it, and
	// nothing is reported free.
	t.Run("held while only the API has a newer version", func(t *testing.T) {
		var reads atomic.Int32
		_, claims := setUp(func(context.Context, string, string) (string, error) { reads.Add(1); return "2", nil })
		released(t, claims)
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return reads.Load() > 0, nil
		})
		if err != nil {
			t.Fatal("the hold was never checked against the API")
		}
		time.Sleep(100 * time.Millisecond) // the check's comparison, after its read
		if !inUse(t, claims) || freed.Load() != 0 {
			t.Errorf("in use %v, freed %d times; want held, never freed", inUse(t, claims), freed.Load())
		}
	})
	// The in-flight set is the scheduler's, shared by its profiles (two
	// DRAScope profiles, as in config-two-profiles.yaml): a hold made by
	// one profile's Unreserve keeps the device from the other's allocator.
	t.Run("held for every profile", func(t *testing.T) {
		view := &viewTracker{claim: claim, inFlight: allocation}
		holds := &releasehold.Holds{}
		holds.Start(context.Background(), apiDown, nil)
		inner := &innerManager2{claims: view}
		failed := New(inner, nil, nil, holds).ResourceClaims()
		other := New(inner, nil, nil, holds).ResourceClaims()
		prebind(t, failed)
		failed.MaybeRemoveClaimPendingAllocation(claim.UID, false)
		failed.AssumedClaimRestore(claim.Namespace, claim.Name)
		if !inUse(t, other) {
			t.Fatal("a device held after one profile's failed write is free in another profile")
		}
	})
	// A scheduling cycle undone (a gang that did not fit) never reached
	// PreBind: nothing was written, and the gang's retry must find the
	// devices free.
	t.Run("not held when PreBind never began", func(t *testing.T) {
		_, claims := setUp(apiDown)
		claims.MaybeRemoveClaimPendingAllocation(claim.UID, false)
		claims.AssumedClaimRestore(claim.Namespace, claim.Name)
		if inUse(t, claims) {
			t.Error("an allocation no PreBind wrote was held")
		}
	})
	t.Run("not held after a successful write", func(t *testing.T) {
		_, claims := setUp(apiDown)
		claims.MaybeRemoveClaimPendingAllocation(claim.UID, true)
		if inUse(t, claims) {
			t.Error("PreBind's removal after a successful write held the device")
		}
	})
}

type innerManager2 struct {
	fwk.SharedDRAManager
	claims fwk.ResourceClaimTracker
}

func (m *innerManager2) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }

// A pod scheduled while an allocation is in flight or held is retried when
// a hold ends (draruntime's waiting pods): the in-flight allocation is held
// if its write fails, and a hold found never written frees its devices
// without any informer event.
func TestMayBeFreedSilently(t *testing.T) {
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"},
	}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "1"}}
	view := &viewTracker{claim: claim}
	claims := New(&innerManager2{claims: view}, nil, nil, &releasehold.Holds{}).ResourceClaims().(*ClaimTracker)
	if claims.MayBeFreedSilently() {
		t.Fatal("nothing in flight or held, yet a pod would wait for a hold to end")
	}
	allocated := claim.DeepCopy()
	allocated.Status.Allocation = allocation
	view.inFlight = allocation
	if err := claims.SignalClaimPendingAllocation(claim.UID, allocated); err != nil {
		t.Fatal(err)
	}
	claims.StartWriting([]types.UID{claim.UID})
	if !claims.MayBeFreedSilently() {
		t.Error("an allocation in flight: a failed write would hold it, and its end would retry nobody")
	}
	claims.MaybeRemoveClaimPendingAllocation(claim.UID, false)
	claims.AssumedClaimRestore(claim.Namespace, claim.Name)
	if !claims.MayBeFreedSilently() {
		t.Error("an allocation held after a failed write: its end would retry nobody")
	}
}
