package dramanager

import (
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/devicechoice"
	"github.com/drascope/drascope/pkg/slicememo"
)

// bestFit orders the slices upstream's PreFilter lists for its allocator
// (deviceChoice: BestFit; pkg/devicechoice): the allocator keeps the order
// of the devices inside a slice, so it then tries them in that order. It
// reads the in-use set upstream gathered just before listing, from the
// cycle's capture, and how many devices the pod asks for, which PreFilter
// stores before upstream's PreFilter runs (devicechoice.Wanted). Scheduling cycles run one at a
// time, so one value per profile serves.
type bestFit struct {
	want atomic.Int32
	// active is set while upstream's PreFilter runs: only its listing
	// builds the allocator (Filter's node-allocatable lookups list too).
	active atomic.Bool
	// orderable remembers which slices have anything to order by.
	orderable slicememo.Memo[bool]
}

// order returns the slices in BestFit order, from what the cycle captured
// as in use; without it (a listing outside upstream's PreFilter), as they
// are.
func (b *bestFit) order(slices []*resourceapi.ResourceSlice, capture *Capture) []*resourceapi.ResourceSlice {
	seen := capture.inUse.Load()
	if !b.active.Load() || seen == nil {
		return slices
	}
	inUse := seen.State.AllocatedDevices
	return devicechoice.OrderPools(slices, devicechoice.Options{
		InUse:     func(id structured.DeviceID) bool { return inUse.Has(id) },
		Want:      int(b.want.Load()),
		Orderable: &b.orderable,
	})
}
