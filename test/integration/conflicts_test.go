package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// Conflicts of every kind are counted in full, in the metric and as events,
// by a scheduler that publishes no ResourcePools: twelve devices each held
// twice (more than the ten validation messages a pool keeps), two
// partitions of one GPU that together exceed its counter, and two shares of
// a device that together exceed its memory. A ResourcePool left from when
// publishing was on is deleted: its status would otherwise stay as if
// current.
func TestConflictsAreCountedWithoutPublishing(t *testing.T) {
	restartScheduler(t, func() {
		const name = "drascope-conflicts"
		leftover, _ := v1alpha1.PlainName("leftover.example.com", "pool")
		if _, err := resourcePools(t).Create(context.Background(), &v1alpha1.ResourcePool{
			ObjectMeta: metav1.ObjectMeta{Name: leftover},
			Spec:       v1alpha1.ResourcePoolSpec{Driver: "leftover.example.com", PoolName: "pool"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		port := startHealthScheduler(t, name, "        policy: Taint\n")
		s := newScenario(t, nil)
		t.Cleanup(func() { s.deleteClaims() })

		node := s.addNode("gpus", 12)
		for _, gpu := range gpuNames(0, 12) {
			for _, holder := range []string{"a", "b"} {
				s.addClaim(gpu+"-"+holder, false)
				s.allocateDirectly(gpu+"-"+holder, node, gpu)
			}
		}

		parts := s.addPartitionablePool("parts", nil)
		s.addClaim("whole", false)
		s.allocateDirectly("whole", parts, "whole")
		s.addClaim("half", false)
		s.allocateDirectly("half", parts, "half-a")

		shared := s.addSharedDevicePool("shared")
		for i, share := range []string{"share-1", "share-2"} {
			s.addClaim(share, false)
			s.allocate(share, resourceapi.DeviceRequestAllocationResult{
				Request: "gpu", Driver: driverName, Pool: shared, Device: "shared-0",
				ShareID:          ptr.To(types.UID([]string{"11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"}[i])),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("6Gi")},
			})
		}

		for _, want := range []struct {
			pool, kind string
			n          float64
		}{
			{node, "OverAllocatedDevice", 12},
			{parts, "OverConsumedCounter", 1},
			{shared, "OverConsumedCapacity", 1},
		} {
			labels := map[string]string{"pool": want.pool, "kind": want.kind}
			var got float64
			err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
				got = scrapeGaugeAt(t, port, "drascope_resourcepool_allocation_conflicts", labels)
				return got == want.n, nil
			})
			if err != nil {
				t.Errorf("drascope_resourcepool_allocation_conflicts%v = %v, want %v", labels, got, want.n)
			}
		}
		if got := counterAt(t, port, "drascope_allocation_conflict_checks_total", map[string]string{"result": "Confirmed"}); got < 14 {
			t.Errorf("drascope_allocation_conflict_checks_total{result=Confirmed} = %v, want at least 14", got)
		}
		s.waitForConflictEvent(parts+"-devices", "OverConsumedCounter", "counter gpu-0/memory: allocated devices consume 120Gi of 80Gi")
		s.waitForConflictEvent(shared, "OverConsumedCapacity", "consume 12Gi of capacity memory, which is 8Gi")
		s.waitForConflictEvent(sliceName(node), "OverAllocatedDevice conflict(s) confirmed from the API", "is allocated to 2 claims")
		if _, err := resourcePools(t).Get(s.ctx, poolObjectName(t, node), metav1.GetOptions{}); !isNotFound(err) {
			t.Errorf("ResourcePool of %s: %v; want none, nothing publishes", node, err)
		}
		if err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := resourcePools(t).Get(ctx, leftover, metav1.GetOptions{})
			return isNotFound(err), nil
		}); err != nil {
			t.Errorf("ResourcePool %s, left from when publishing was on, is still there; want it deleted by the leader that does not publish", leftover)
		}
	})
}

// addSharedDevicePool publishes one device, "shared-0", that allows
// multiple allocations out of 8Gi of memory.
func (s *scenario) addSharedDevicePool(suffix string) string {
	s.t.Helper()
	pool := s.namespace + "-" + suffix
	s.publishSlice(&resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: resourceapi.ResourceSliceSpec{Driver: driverName, Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}, AllNodes: ptr.To(true),
			Devices: []resourceapi.Device{{
				Name: "shared-0", AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("8Gi")}},
			}}},
	})
	return pool
}

// allocate writes a claim's allocation as a second scheduler process would,
// without any scheduler's knowledge.
func (s *scenario) allocate(claimName string, results ...resourceapi.DeviceRequestAllocationResult) {
	s.t.Helper()
	claim := s.getClaim(claimName)
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	if _, err := env.client.ResourceV1().ResourceClaims(s.namespace).UpdateStatus(s.ctx, claim, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("writing the allocation of claim %s: %v", claimName, err)
	}
}

// deleteClaims deletes the scenario's claims, such as those made to
// conflict on purpose, before the end-of-test invariant looks.
func (s *scenario) deleteClaims() {
	if err := env.client.ResourceV1().ResourceClaims(s.namespace).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		s.t.Errorf("deleting the claims of %s: %v", s.namespace, err)
	}
}

// waitForConflictEvent waits for a Warning DeviceAllocationConflict event
// on a slice whose note contains each of want.
func (s *scenario) waitForConflictEvent(slice string, want ...string) {
	s.t.Helper()
	var notes []string
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		events, err := env.client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + slice})
		if err != nil {
			return false, err
		}
		notes = notes[:0]
		for _, e := range events.Items {
			if e.Reason != "DeviceAllocationConflict" || e.Type != v1.EventTypeWarning {
				continue
			}
			notes = append(notes, e.Note)
			found := true
			for _, w := range want {
				found = found && strings.Contains(e.Note, w)
			}
			if found {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Errorf("no DeviceAllocationConflict event on ResourceSlice %s containing %q; events: %q", slice, want, notes)
	}
}
