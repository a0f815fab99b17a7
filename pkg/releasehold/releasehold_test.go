package releasehold

import (
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
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
