// Package drausage holds the counting rules of drascope: which devices a
// claim holds in use. It is pure: no clients, no goroutines.
package drausage

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// DeviceVisitor receives the devices that one claim's allocation holds in use.
// A nil callback is skipped.
type DeviceVisitor struct {
	// Dedicated is called for a device allocated to the claim alone.
	Dedicated func(structured.DeviceID)
	// Shared is called for one share of a device that allows multiple
	// allocations (the result carries a ShareID).
	Shared func(structured.SharedDeviceID)
	// ConsumedCapacity is called, after Shared, for a share that consumes
	// part of the device's capacity.
	ConsumedCapacity func(structured.DeviceConsumedCapacity)
}

// ForeachAllocatedDevice walks the allocation results of claim and reports each
// device it holds in use to v. Results with adminAccess: true are skipped:
// KEP-5018 admin access observes a device without using it up. An
// unallocated claim reports nothing.
//
// Unlike the upstream scheduler's private helper of the same purpose, a result
// with a ShareID is always reported as a share: the apiserver only stores a
// ShareID when consumable capacity is enabled, and accounting must describe
// what the claim says, not what this process's gates would allocate.
func ForeachAllocatedDevice(claim *resourceapi.ResourceClaim, v DeviceVisitor) {
	if claim == nil || claim.Status.Allocation == nil {
		return
	}
	for i := range claim.Status.Allocation.Devices.Results {
		result := &claim.Status.Allocation.Devices.Results[i]
		if ptr.Deref(result.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
		if result.ShareID == nil {
			if v.Dedicated != nil {
				v.Dedicated(id)
			}
			continue
		}
		if v.Shared != nil {
			v.Shared(structured.MakeSharedDeviceID(id, result.ShareID))
		}
		if result.ConsumedCapacity != nil && v.ConsumedCapacity != nil {
			v.ConsumedCapacity(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
		}
	}
}
