package drascope

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
// When upstream fixes #140729, delete this file, draManager's
// countersIgnored field and listedSlices' ignore step (slices.go), and go
// back to calling upstream's PreFilter in PreFilter and to Filter without
// the note.

import (
	"context"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/utils/ptr"
)

// upstreamIssue names the upstream bug in messages, docs and logs.
const upstreamIssue = "kubernetes/kubernetes#140729"

// countersIgnored is true while upstream's PreFilter runs for a pod whose
// every unallocated request asks for admin access. Scheduling cycles run
// one at a time, and only PreFilter builds the allocator from the slices;
// upstream's other reads of them (node-allocatable resources, in PreFilter
// and Filter) look up devices' NodeAllocatableResources, never counters.
type countersIgnored struct{ atomic.Bool }

// withZeroCounterConsumption returns the slices with every amount a device
// consumes of a counter set to zero, copying only the slices that change:
// the listed slices are the informer's and must not be modified.
func withZeroCounterConsumption(slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
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

// adminAccessUse says how the pod's unallocated claims ask for admin
// access: only (every request of every claim still to allocate), mixed
// (some requests do, some do not), or not at all. A pod whose extended
// resources DRA serves counts as having ordinary requests, and so does a
// claim not created yet: upstream's PreFilter decides about it.
type adminAccessUse int

const (
	noAdminAccess adminAccessUse = iota
	onlyAdminAccess
	mixedAdminAccess
)

func (pl *DRAScope) adminAccessUse(claims *podClaims, pod *v1.Pod) adminAccessUse {
	admin, ordinary := 0, claims.unknown
	for _, claim := range claims.toAllocate {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil && ptr.Deref(request.Exactly.AdminAccess, false) {
				admin++
			} else {
				ordinary++
			}
		}
	}
	if admin > 0 && pl.requestsDRAExtendedResources(pod) {
		ordinary++
	}
	switch {
	case admin == 0:
		return noAdminAccess
	case ordinary == 0:
		return onlyAdminAccess
	default:
		return mixedAdminAccess
	}
}

// requestsDRAExtendedResources reports whether a container asks for an
// extended resource that a DeviceClass maps to DRA devices (any extended
// resource, when the mapping is unknown).
func (pl *DRAScope) requestsDRAExtendedResources(pod *v1.Pod) bool {
	var resolver fwk.DeviceClassResolver
	if pl.manager != nil {
		resolver = pl.manager.DeviceClassResolver()
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range containers {
			for _, list := range []v1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name, quantity := range list {
					if quantity.IsZero() || !v1helper.IsExtendedResourceName(name) {
						continue
					}
					if resolver == nil || resolver.GetDeviceClass(name) != nil {
						return true
					}
				}
			}
		}
	}
	return false
}

// preFilterIgnoringCounters runs upstream's PreFilter, over slices without
// counter consumption when the pod asks for admin access only, and notes a
// mixed pod in the cycle state for Filter's message.
func (pl *DRAScope) preFilterIgnoringCounters(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims) (*fwk.PreFilterResult, *fwk.Status) {
	use := noAdminAccess
	if pl.manager != nil {
		use = pl.adminAccessUse(claims, pod)
	}
	switch use {
	case onlyAdminAccess:
		klog.FromContext(ctx).V(5).Info("Allocating admin access without shared counters", "pod", klog.KObj(pod), "workaround", upstreamIssue)
		pl.manager.countersIgnored.Store(true)
		defer pl.manager.countersIgnored.Store(false)
	case mixedAdminAccess:
		state.Write(mixedAdminAccessKey, mixedAdminAccessData{})
	}
	return pl.DynamicResources.PreFilter(ctx, state, pod, nodes)
}

const mixedAdminAccessKey fwk.StateKey = Name + "/mixed-admin-access"

type mixedAdminAccessData struct{}

func (mixedAdminAccessData) Clone() fwk.StateData { return mixedAdminAccessData{} }

// mixedAdminAccessNote explains, on a node refused to a pod that needs
// admin-access and ordinary requests allocated together, that its
// admin-access requests were held to shared counters as upstream does.
func mixedAdminAccessNote(state fwk.CycleState) string {
	if _, ok := fromCycle[mixedAdminAccessData](state, mixedAdminAccessKey); !ok {
		return ""
	}
	return fmt.Sprintf("node(s) counted shared counters against admin-access requests made together with ordinary ones, as upstream does (%s; give admin access a pod of its own)", upstreamIssue)
}
