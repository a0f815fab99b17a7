package dramanager

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// innerTracker stands in for the scheduler's claim tracker: it succeeds or
// fails as told. Only the in-flight methods are used.
type innerTracker struct {
	fwk.ResourceClaimTracker
	err     error
	removed bool
	// unrecorded: SignalClaimPendingAllocation succeeds without an
	// in-flight entry, as upstream's does for a claim the assume cache
	// already has allocated.
	unrecorded bool
	// inFlight is the allocation in flight once signalled.
	inFlight *resourceapi.AllocationResult
}

func (t *innerTracker) SignalClaimPendingAllocation(_ types.UID, claim *resourceapi.ResourceClaim) error {
	if t.inFlight == nil {
		t.inFlight = claim.Status.Allocation
	}
	return t.err
}
func (t *innerTracker) GetPendingAllocation(types.UID) *resourceapi.AllocationResult {
	if t.err != nil || t.unrecorded {
		return nil
	}
	return t.inFlight
}
func (t *innerTracker) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool { return t.removed }
func (t *innerTracker) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error {
	return t.err
}
func (t *innerTracker) AssumedClaimRestore(string, string) {}
func (t *innerTracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	return nil, fmt.Errorf("claim %s/%s not tracked", namespace, name)
}

type innerManager struct {
	fwk.SharedDRAManager
	claims *innerTracker
}

func (m *innerManager) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }

// recorder is an Observer that writes down what it was told.
type recorder struct {
	calls       []string
	allocations []*resourceapi.AllocationResult
}

func (r *recorder) PendingAllocation(c *resourceapi.ResourceClaim) {
	r.calls = append(r.calls, "pending "+c.Name)
	r.allocations = append(r.allocations, c.Status.Allocation)
}
func (r *recorder) PendingAllocationRemoved(uid types.UID) {
	r.calls = append(r.calls, "removed "+string(uid))
}
func (r *recorder) Assumed(c *resourceapi.ResourceClaim) {
	r.calls = append(r.calls, "assumed "+c.Name)
}
func (r *recorder) AssumeRestored(ns, name string) {
	r.calls = append(r.calls, "restored "+ns+"/"+name)
}

func TestDRAManagerReportsInFlightAllocations(t *testing.T) {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	tests := map[string]struct {
		err        error
		removed    bool
		unrecorded bool
		want       []string
	}{
		"the scheduler's tracker accepts every change": {
			removed: true,
			want:    []string{"pending c", "removed uid-c", "assumed c", "restored ns/c"},
		},
		"refused changes and removals that removed nothing are not reported": {
			err:  errors.New("conflict"),
			want: []string{"restored ns/c"},
		},
		// Upstream creates no in-flight entry for a claim the assume cache
		// has allocated already; reporting one would leave the side cache
		// showing the device drascope would have picked, for good.
		"a pending allocation upstream did not record is not reported": {
			unrecorded: true,
			want:       []string{"assumed c", "restored ns/c"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inner := &innerTracker{err: tc.err, removed: tc.removed, unrecorded: tc.unrecorded}
			observer := &recorder{}
			claims := New(&innerManager{claims: inner}, observer, nil, nil).ResourceClaims()

			if err := claims.SignalClaimPendingAllocation(claim.UID, claim); !errors.Is(err, tc.err) {
				t.Errorf("SignalClaimPendingAllocation returned %v, want the inner result %v", err, tc.err)
			}
			if got := claims.MaybeRemoveClaimPendingAllocation(claim.UID, false); got != tc.removed {
				t.Errorf("MaybeRemoveClaimPendingAllocation returned %v, want the inner result %v", got, tc.removed)
			}
			if err := claims.AssumeClaimAfterAPICall(claim); !errors.Is(err, tc.err) {
				t.Errorf("AssumeClaimAfterAPICall returned %v, want the inner result %v", err, tc.err)
			}
			claims.AssumedClaimRestore("ns", "c")
			if diff := cmp.Diff(tc.want, observer.calls); diff != "" {
				t.Errorf("observer calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A second pod sharing a claim whose allocation is in flight signals its own
// allocation; upstream keeps the first, and the observer is told that one.
func TestDRAManagerReportsTheAllocationUpstreamKeeps(t *testing.T) {
	first := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Device: "gpu-0"}}}}
	second := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Device: "gpu-1"}}}}
	claim := func(a *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared", UID: "uid-s"}, Status: resourceapi.ResourceClaimStatus{Allocation: a}}
	}
	observer := &recorder{}
	claims := New(&innerManager{claims: &innerTracker{}}, observer, nil, nil).ResourceClaims()
	for _, a := range []*resourceapi.AllocationResult{first, second} {
		if err := claims.SignalClaimPendingAllocation("uid-s", claim(a)); err != nil {
			t.Fatal(err)
		}
	}
	if len(observer.allocations) != 2 || observer.allocations[0] != first || observer.allocations[1] != first {
		t.Errorf("observer told %v, want the first allocation twice", observer.allocations)
	}
}

// The profile's record of allocations in flight keeps only those upstream's
// shared tracker still holds: one another profile removed (a shared claim)
// or one whose removal raced its record is dropped, not held for ever.
func TestInFlightDropsWhatUpstreamNoLongerHolds(t *testing.T) {
	held := &resourceapi.AllocationResult{}
	// The inner tracker holds one allocation in flight; "removed" records
	// another.
	tracker := &ClaimTracker{ResourceClaimTracker: &innerTracker{inFlight: held}}
	tracker.pending.byClaim = map[types.UID]*resourceapi.AllocationResult{
		"held":    held,
		"removed": {},
	}
	if got := tracker.InFlight(); len(got) != 1 || got[0] != held {
		t.Errorf("inFlight = %v, want only the allocation upstream still holds", got)
	}
	if _, ok := tracker.pending.byClaim["removed"]; ok {
		t.Error("the entry upstream no longer holds was kept")
	}
}
