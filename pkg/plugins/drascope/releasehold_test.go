package drascope

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/structured"
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

	setUp := func(read releasehold.VersionReader) (*viewTracker, fwk.ResourceClaimTracker) {
		view := &viewTracker{claim: claim, inFlight: allocation}
		holds := &releasehold.Holds{}
		holds.Start(context.Background(), read)
		manager := newDRAManager(&innerManager2{claims: view}, nil, nil, holds)
		return view, manager.ResourceClaims()
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
	// prebind puts the allocation in flight through the decorator and
	// marks it as being written, as Reserve and PreBind do.
	prebind := func(t *testing.T, claims fwk.ResourceClaimTracker) {
		t.Helper()
		allocated := claim.DeepCopy()
		allocated.Status.Allocation = allocation
		if err := claims.SignalClaimPendingAllocation(claim.UID, allocated); err != nil {
			t.Fatal(err)
		}
		claims.(*claimTracker).startWriting([]types.UID{claim.UID})
	}

	t.Run("held until the informer delivers the claim", func(t *testing.T) {
		view, claims := setUp(apiDown)
		prebind(t, claims)
		claims.MaybeRemoveClaimPendingAllocation(claim.UID, false)
		claims.AssumedClaimRestore(claim.Namespace, claim.Name)
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
	t.Run("released once the API shows the write never happened", func(t *testing.T) {
		_, claims := setUp(func(context.Context, string, string) (string, error) { return "1", nil })
		prebind(t, claims)
		claims.MaybeRemoveClaimPendingAllocation(claim.UID, false)
		claims.AssumedClaimRestore(claim.Namespace, claim.Name)
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return !inUse(t, claims), nil
		})
		if err != nil {
			t.Error("the device stayed in use although the API has the claim unallocated at the version the scheduler saw")
		}
	})
	// The in-flight set is the scheduler's, shared by its profiles (two
	// DRAScope profiles, as in config-two-profiles.yaml): a hold made by
	// one profile's Unreserve keeps the device from the other's allocator.
	t.Run("held for every profile", func(t *testing.T) {
		view := &viewTracker{claim: claim, inFlight: allocation}
		holds := &releasehold.Holds{}
		holds.Start(context.Background(), apiDown)
		inner := &innerManager2{claims: view}
		failed := newDRAManager(inner, nil, nil, holds).ResourceClaims()
		other := newDRAManager(inner, nil, nil, holds).ResourceClaims()
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
