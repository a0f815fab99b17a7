package drascope

import (
	"errors"
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
}

func (t *innerTracker) SignalClaimPendingAllocation(types.UID, *resourceapi.ResourceClaim) error {
	return t.err
}
func (t *innerTracker) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool { return t.removed }
func (t *innerTracker) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error {
	return t.err
}
func (t *innerTracker) AssumedClaimRestore(string, string) {}

type innerManager struct {
	fwk.SharedDRAManager
	claims *innerTracker
}

func (m *innerManager) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }

// recorder is an InFlightObserver that writes down what it was told.
type recorder struct{ calls []string }

func (r *recorder) PendingAllocation(c *resourceapi.ResourceClaim) {
	r.calls = append(r.calls, "pending "+c.Name)
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
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"}}
	tests := map[string]struct {
		err     error
		removed bool
		want    []string
	}{
		"the scheduler's tracker accepts every change": {
			removed: true,
			want:    []string{"pending c", "removed uid-c", "assumed c", "restored ns/c"},
		},
		"refused changes and removals that removed nothing are not reported": {
			err:  errors.New("conflict"),
			want: []string{"restored ns/c"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inner := &innerTracker{err: tc.err, removed: tc.removed}
			observer := &recorder{}
			claims := newDRAManager(&innerManager{claims: inner}, observer, nil).ResourceClaims()

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
