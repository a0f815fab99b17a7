package kubectldra

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/health"
)

// namespaces is the one namespace, or nil for "".
func namespaces(namespace string) []string {
	if namespace == "" {
		return nil
	}
	return []string{namespace}
}

// writtenAt sets when obj was last written, as the apiserver records it.
func writtenAt(obj metav1.Object, at time.Time) {
	obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "test", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: at}}})
}

// A ResourcePool written before its pool's claim was allocated, and still
// counting none allocated, is stale once that change is more than
// staleAfter old; not before, not when written after it, not when the
// counts agree (a change that does not move them), and not when the
// recount would miss claims the user may not list.
func TestStaleResourcePoolsAreNamed(t *testing.T) {
	slice := testSlice("node-1", "gpu-0", "gpu-1")
	writtenAt(slice, now.Add(-time.Hour))
	claim := testClaim("team-a", "train", "node-1", "gpu-0")
	allocated := now.Add(-time.Minute)
	writtenAt(claim, allocated)
	rp := func(allocatedDevices int32, written time.Time) v1alpha1.ResourcePool {
		p := published("node-1", allocatedDevices)
		p.Status.LastUpdateTime = &metav1.Time{Time: written}
		return *p
	}
	for _, tc := range []struct {
		name      string
		pool      v1alpha1.ResourcePool
		now       time.Time
		claimsIn  string
		wantStale bool
	}{
		{"written before the allocation, counting none", rp(0, allocated.Add(-time.Hour)), now, "", true},
		{"the allocation only 5s old", rp(0, allocated.Add(-time.Hour)), allocated.Add(5 * time.Second), "", false},
		{"written after the allocation", rp(0, allocated.Add(time.Second)), now, "", false},
		{"counts agree", rp(1, allocated.Add(-time.Hour)), now, "", false},
		{"claims of one namespace only", rp(0, allocated.Add(-time.Hour)), now, "team-a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &poolSource{now: tc.now, view: &clusterView{
				slices:           []*resourceapi.ResourceSlice{slice},
				claims:           []*resourceapi.ResourceClaim{claim},
				claimsNamespaces: namespaces(tc.claimsIn),
			}}
			note, err := s.staleNote(context.Background(), []v1alpha1.ResourcePool{tc.pool})
			if err != nil {
				t.Fatal(err)
			}
			if stale := note != ""; stale != tc.wantStale {
				t.Fatalf("note %q; want stale %v", note, tc.wantStale)
			}
			if tc.wantStale && !strings.Contains(note, tc.pool.Name) || tc.wantStale && !strings.Contains(note, "counts 0 allocated of 2, the claims 1 of 2") {
				t.Errorf("note %q; want it to name %s and both counts", note, tc.pool.Name)
			}
		})
	}
}

// DeviceTaintRules drascope-scheduler wrote for a listed pool are named
// when no replica leads to end them (a Lease nobody renews), with the
// command that deletes them; not while a replica renews the Lease, nor
// without a Lease (a single replica without leader election).
func TestOrphanedTaintRulesAreNamed(t *testing.T) {
	rule := &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: "drascope-gpu-0", Labels: map[string]string{health.ManagedByLabel: health.ManagedBy}},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(testDriver), Pool: ptr.To("node-1"), Device: ptr.To("gpu-0")},
			Taint:          resourceapi.DeviceTaint{Key: health.TaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}
	lease := func(renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: schedulerLeaseNamespace, Name: schedulerLeaseName},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("replica-a"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		pool    string
		want    string
	}{
		{"no Lease: leader election off, or never started", []runtime.Object{rule}, "node-1", ""},
		{"a Lease nobody renews", []runtime.Object{rule, lease(now.Add(-time.Hour))}, "node-1", "nobody renews the Lease kube-system/drascope-scheduler (last renewed 1h0m0s ago)"},
		{"a leader", []runtime.Object{rule, lease(now.Add(-5 * time.Second))}, "node-1", ""},
		{"a rule of another pool", []runtime.Object{rule}, "node-2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(append(tc.objects, testSlice("node-1", "gpu-0"), testSlice("node-2", "gpu-0")))
			note, err := c.source("").orphanedRulesNote(context.Background(), []v1alpha1.ResourcePool{*published(tc.pool, 0)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if note != "" {
					t.Errorf("note %q, want none", note)
				}
				return
			}
			if !strings.Contains(note, tc.want) || !strings.Contains(note, "kubectl delete devicetaintrules -l app.kubernetes.io/managed-by=drascope-scheduler") {
				t.Errorf("note %q; want it to say %q and how to delete the rules", note, tc.want)
			}
		})
	}
}
