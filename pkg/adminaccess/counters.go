package adminaccess

// This file works around kubernetes/kubernetes#140729 ("DRA: AdminAccess
// consumes counters"): upstream's allocator checks an admin-access request
// for a partitionable device against the shared counters other claims use
// up, and lets admin-access results use up counters for the pod's later
// requests, although admin access observes a device and uses none of it
// (KEP-5018). A monitoring pod is then refused the GPU a workload fully
// uses, which is exactly the GPU it must watch.
//
// The seam: when every request the pod still needs allocated asks for admin
// access, upstream's PreFilter builds its allocator over slices in which
// every amount a device consumes of a counter is zero. Everything else stays:
// which counter sets and counters a device names (so a pool upstream finds
// invalid for a missing counter set stays invalid, and a device that
// consumes counters is still refused with DRAPartitionableDevices off),
// compatibility groups, selectors, node selection, taints and binding
// conditions. Admin access is never checked against devices in use, so the
// result is upstream's allocation with every counter check passing. A pod
// that also needs an ordinary request allocated keeps upstream's behaviour:
// its counters are real.
//
// When upstream fixes #140729, delete this file, the decorated DRA
// manager's countersIgnored field and listedSlices' ignore step
// (pkg/dramanager, slices.go), and go back to calling upstream's
// PreFilter in PreFilter and to Filter without the note.

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// UpstreamIssue names the upstream bug in messages, docs and logs.
const UpstreamIssue = "kubernetes/kubernetes#140729"

// WithZeroCounterConsumption returns the slices with every amount a device
// consumes of a counter set to zero, copying only the slices that change:
// the listed slices are the informer's and must not be modified.
func WithZeroCounterConsumption(slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(slices))
	for i, slice := range slices {
		out[i] = slice
		consumes := false
		for j := range slice.Spec.Devices {
			consumes = consumes || len(slice.Spec.Devices[j].ConsumesCounters) > 0
		}
		if !consumes {
			continue
		}
		copied := *slice
		copied.Spec.Devices = make([]resourceapi.Device, len(slice.Spec.Devices))
		for j, device := range slice.Spec.Devices {
			if len(device.ConsumesCounters) > 0 {
				consumption := make([]resourceapi.DeviceCounterConsumption, len(device.ConsumesCounters))
				for k, c := range device.ConsumesCounters {
					zero := make(map[string]resourceapi.Counter, len(c.Counters))
					for name := range c.Counters {
						zero[name] = resourceapi.Counter{Value: resource.Quantity{}}
					}
					c.Counters = zero
					consumption[k] = c
				}
				device.ConsumesCounters = consumption
			}
			copied.Spec.Devices[j] = device
		}
		out[i] = &copied
	}
	return out
}

// Use says how a pod's unallocated claims ask for admin access: only
// (every request of every claim still to allocate), mixed (some requests
// do, some do not), or not at all.
type Use int

const (
	None Use = iota
	Only
	Mixed
)

// UseOf says how the claims still to allocate ask for admin access.
// unknown counts the pod's claims not created yet, and ordinaryExtended
// says whether the pod asks for extended resources DRA may serve: both
// count as ordinary requests, which upstream's PreFilter decides about.
func UseOf(toAllocate []*resourceapi.ResourceClaim, unknown int, ordinaryExtended func() bool) Use {
	admin, ordinary := 0, unknown
	for _, claim := range toAllocate {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil && ptr.Deref(request.Exactly.AdminAccess, false) {
				admin++
			} else {
				ordinary++
			}
		}
	}
	if admin > 0 && ordinaryExtended() {
		ordinary++
	}
	switch {
	case admin == 0:
		return None
	case ordinary == 0:
		return Only
	default:
		return Mixed
	}
}

// MixedNote explains, on a node refused to a pod that needs admin-access
// and ordinary requests allocated together, that its admin-access requests
// were held to shared counters as upstream does.
func MixedNote() string {
	return fmt.Sprintf("node(s) counted shared counters against admin-access requests made together with ordinary ones, as upstream does (%s; give admin access a pod of its own)", UpstreamIssue)
}
