package releasehold

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// An allocation removed under a UID that no claim has (upstream signals the
// claim of DRA-backed extended resources under a temporary UID per
// attempt, and never names it again) is not kept for ever: a pod retried
// for hours made one entry per attempt.
func TestReleasedUnderATemporaryUIDIsForgotten(t *testing.T) {
	clock := testingclock.NewFakePassiveClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	h := &Holds{Clock: clock}
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"},
	}}}
	for attempt := range 1000 {
		h.Released(types.UID(fmt.Sprintf("temporary-%d", attempt)), allocation)
		clock.SetTime(clock.Now().Add(time.Second))
	}
	if released, held := h.Sizes(); released > int(releasedFor/time.Second)+1 || held != 0 {
		t.Errorf("after 1000 attempts a second apart: %d released allocations and %d holds kept, want at most %d and none", released, held, int(releasedFor/time.Second)+1)
	}
}

// A held share counts as upstream's claim tracker counts one: with
// DRAConsumableCapacity, its share and the capacity it consumes, so that
// the rest of the device stays free for other shares; without, the whole
// device. A dedicated result is the whole device either way, and an
// admin-access result holds nothing.
func TestHeldShareCountsAsAShare(t *testing.T) {
	share := types.UID("share-1")
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: "nic.example.com", Pool: "node-1", Device: "nic-0", ShareID: &share,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("10Gi")}},
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"},
		{Request: "monitor", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-1", AdminAccess: ptr.To(true)},
	}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "7"}}
	same := func(string, string) (string, bool) { return "7", true }
	nic := structured.MakeDeviceID("nic.example.com", "node-1", "nic-0")
	gpu := structured.MakeDeviceID("gpu.example.com", "node-1", "gpu-0")

	for _, shares := range []bool{true, false} {
		h := &Holds{}
		h.Released(claim.UID, allocation)
		h.Restored(claim)
		state := structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		}
		whole := h.InsertHeld(state, shares, same)
		wantWhole := sets.New(gpu)
		if !shares {
			wantWhole.Insert(nic)
		}
		if !whole.Equal(wantWhole) || !state.AllocatedDevices.Equal(wantWhole) {
			t.Errorf("shares=%v: whole %v, in use %v; want %v", shares, whole, state.AllocatedDevices, wantWhole)
		}
		wantShares := sets.New[structured.SharedDeviceID]()
		if shares {
			wantShares.Insert(structured.MakeSharedDeviceID(nic, &share))
		}
		if !state.AllocatedSharedDeviceIDs.Equal(wantShares) {
			t.Errorf("shares=%v: shared IDs %v, want %v", shares, state.AllocatedSharedDeviceIDs, wantShares)
		}
		if got := state.AggregatedCapacity[nic]; shares && (got == nil || got["bandwidth"].Cmp(resource.MustParse("10Gi")) != 0) {
			t.Errorf("shares=%v: consumed capacity of nic-0 %v, want 10Gi of bandwidth", shares, got)
		}
	}
}

// A hold ends when the informer delivers a newer version of its claim, or
// its deletion, and that end is reported: the event itself retries no pod
// refused for the devices (upstream's hint skips a change of another pod's
// claim that removes no allocation, such as a failed write's finalizer).
func TestHoldEndsWhenTheViewMoves(t *testing.T) {
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"},
	}}}
	apiDown := func(context.Context, string, string) (string, error) { return "", fmt.Errorf("connection refused") }
	for _, gone := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var freed atomic.Int32
		h := &Holds{}
		h.Start(ctx, apiDown, func(klog.Logger) { freed.Add(1) })
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c", ResourceVersion: "1"}}
		h.Released(claim.UID, allocation)
		h.Restored(claim)
		h.ViewChanged(claim, false) // the same version: the hold stays
		if !h.Holding() || freed.Load() != 0 {
			t.Fatalf("gone=%v: after an event at the held version, holding %v and freed %d times; want held, never freed", gone, h.Holding(), freed.Load())
		}
		moved := claim.DeepCopy()
		moved.ResourceVersion = "2"
		h.ViewChanged(moved, gone)
		h.ViewChanged(moved, gone)
		if h.Holding() || freed.Load() != 1 {
			t.Errorf("gone=%v: after the view moved, holding %v and freed %d times; want no hold, freed once", gone, h.Holding(), freed.Load())
		}
		cancel()
	}
}
