// Package allocated says which devices an allocation result holds, counted
// as upstream's scheduler counts devices in use (the dynamicresources
// plugin's foreachAllocatedDevice): a result with admin access holds
// nothing; a result with a ShareID holds a share of its device and the
// capacity it consumes where shares are tracked (DRAConsumableCapacity),
// the whole device otherwise; any other result holds the whole device.
//
// Every part of drascope that counts in-use devices goes through Each, so
// that the counting rule is written once and cannot drift between the
// allocator's view, the dry runs, the release holds and the pool counts.
package allocated

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// Hold is what one result of an allocation holds.
type Hold int

const (
	// Nothing: a result with admin access uses its device without holding it.
	Nothing Hold = iota
	// Whole: the device, which no other claim may then hold.
	Whole
	// Share: a share of a device that allows multiple allocations, and
	// the capacity the result consumes.
	Share
)

// HoldOf says what a result holds. shares says whether a result with a
// ShareID counts as a share (the allocator tracks shares) or as its whole
// device.
func HoldOf(result *resourceapi.DeviceRequestAllocationResult, shares bool) Hold {
	switch {
	case ptr.Deref(result.AdminAccess, false):
		return Nothing
	case shares && result.ShareID != nil:
		return Share
	}
	return Whole
}

// Visitor receives the devices of one allocation. Nil callbacks are
// skipped.
type Visitor struct {
	// Whole is called for a device held whole.
	Whole func(result *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID)
	// Share is called for a share of a device, with the capacity it
	// consumes (nil when it names none).
	Share func(result *resourceapi.DeviceRequestAllocationResult, id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity)
}

// Each calls v for every device allocation holds (nil: none), as HoldOf
// counts them.
func Each(allocation *resourceapi.AllocationResult, shares bool, v Visitor) {
	if allocation == nil {
		return
	}
	for i := range allocation.Devices.Results {
		result := &allocation.Devices.Results[i]
		switch HoldOf(result, shares) {
		case Whole:
			if v.Whole != nil {
				v.Whole(result, structured.MakeDeviceID(result.Driver, result.Pool, result.Device))
			}
		case Share:
			if v.Share != nil {
				id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
				var consumed *structured.DeviceConsumedCapacity
				if result.ConsumedCapacity != nil {
					consumed = ptr.To(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				v.Share(result, structured.MakeSharedDeviceID(id, result.ShareID), consumed)
			}
		}
	}
}

// HoldsAny reports whether the allocation holds any device: whether
// releasing it frees anything.
func HoldsAny(allocation *resourceapi.AllocationResult) bool {
	if allocation == nil {
		return false
	}
	for i := range allocation.Devices.Results {
		if HoldOf(&allocation.Devices.Results[i], true) != Nothing {
			return true
		}
	}
	return false
}

// WithoutFree returns the slices without the devices that are free and
// that leaveOut selects, copying only the slices that change: an allocator
// built from them finds only the other devices free. Devices in use stay:
// the allocator counts the shared counters they consume, and never hands
// them out. A device that allows multiple allocations stays too: a share
// of it may be free and in use at once. inUse may be nil (nothing in use).
func WithoutFree(listed []*resourceapi.ResourceSlice, leaveOut, inUse func(structured.DeviceID) bool) []*resourceapi.ResourceSlice {
	if inUse == nil {
		inUse = func(structured.DeviceID) bool { return false }
	}
	out := make([]*resourceapi.ResourceSlice, len(listed))
	for i, slice := range listed {
		out[i] = slice
		// nil until a device is left out: then the ones before it.
		var kept []resourceapi.Device
		for j, device := range slice.Spec.Devices {
			id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
			keep := !leaveOut(id) || inUse(id) || (device.AllowMultipleAllocations != nil && *device.AllowMultipleAllocations)
			switch {
			case !keep && kept == nil:
				kept = make([]resourceapi.Device, j, len(slice.Spec.Devices))
				copy(kept, slice.Spec.Devices[:j])
			case keep && kept != nil:
				kept = append(kept, device)
			}
		}
		if kept != nil {
			copied := *slice
			copied.Spec.Devices = kept
			out[i] = &copied
		}
	}
	return out
}
