package dramanager

import (
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
)

// Capture holds what upstream's PreFilter built this cycle's allocator
// from, as the decorated DRA manager saw it go by. It is the one place that
// knows which of upstream's calls feed it. In v1.37.2, upstream's PreFilter
// (dynamicresources.go), for a pod with claims to allocate, asks the claim
// tracker for the devices in use (GatherAllocatedState with
// DRAConsumableCapacity, else ListAllAllocatedDevices; again only after a
// concurrent modification, and the last answer is used), then lists the
// slices once (ResourceSlices().ListWithDeviceTaintRules()), and builds
// structured.NewAllocator from those two. Upstream's other reads of the
// slices (node-allocatable resources, with DRANodeAllocatableResources)
// come before that listing in PreFilter, or in Filter after take: the last
// listing in PreFilter is the allocator's.
// TestCaptureIsWhatUpstreamBuiltItsAllocatorFrom runs upstream's real
// PreFilter through the decorator and fails when that pattern changes.
//
// Scheduling cycles run one at a time, so one capture per profile serves.
type Capture struct {
	inUse  atomic.Pointer[InUse]
	slices atomic.Pointer[[]*resourceapi.ResourceSlice]
}

// begin forgets what an earlier cycle captured: call it right before
// upstream's PreFilter.
func (c *Capture) begin() {
	c.inUse.Store(nil)
	c.slices.Store(nil)
}

// sawInUse records the in-use state handed to upstream, with what drascope
// added to it; the last call wins.
func (c *Capture) sawInUse(seen *InUse) {
	if c != nil {
		c.inUse.Store(seen)
	}
}

// sawSlices records the slices handed to upstream; the last call wins.
func (c *Capture) sawSlices(slices []*resourceapi.ResourceSlice) {
	if c != nil {
		c.slices.Store(&slices)
	}
}

// take returns what upstream's PreFilter built its allocator from, once:
// ok is false when it built none (nothing to allocate, or it failed before).
func (c *Capture) take() (inUse *InUse, slices []*resourceapi.ResourceSlice, ok bool) {
	seen, listed := c.inUse.Swap(nil), c.slices.Swap(nil)
	if seen == nil || listed == nil {
		return nil, nil, false
	}
	return seen, *listed, true
}
