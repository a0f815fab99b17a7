package drascope

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// podClaims are a pod's claims as a scheduling cycle starts: those still to
// allocate, how many are allocated, and how many could not be read (not
// created yet, or an error). PreFilter gathers them once; the admin-access
// guards, the counters workaround, node pruning and scoring read them,
// rather than each asking the claim tracker again.
type podClaims struct {
	toAllocate []*resourceapi.ResourceClaim
	unknown    int
	// allocated counts the claims allocated already.
	allocated int
	// refused counts the claims upstream's PreFilter refuses the pod
	// for whatever the devices: being deleted, or made from a template
	// for another pod (mayPruneFirst).
	refused int
}

// claimsOf gathers the pod's claims from the claim tracker (including
// in-flight changes). A claim the pod's status says was not needed is left
// out.
func (pl *DRAScope) claimsOf(pod *v1.Pod) *podClaims {
	c := &podClaims{}
	for i := range pod.Spec.ResourceClaims {
		name, mustCheckOwner, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		switch {
		case err != nil:
			c.unknown++
			continue
		case name == nil:
			continue
		}
		claim, err := pl.claims.Get(pod.Namespace, *name)
		if err == nil && (claim.DeletionTimestamp != nil ||
			mustCheckOwner && resourceclaim.IsForPod(pod, claim, pl.features.EnableDRAWorkloadResourceClaims) != nil) {
			c.refused++
		}
		switch {
		case err != nil:
			c.unknown++
		case claim.Status.Allocation == nil:
			c.toAllocate = append(c.toAllocate, claim)
		default:
			c.allocated++
		}
	}
	return c
}

// claimsIn returns the claims PreFilter gathered, or gathers them.
func (pl *DRAScope) claimsIn(state fwk.CycleState, pod *v1.Pod) *podClaims {
	if c, ok := fromCycle[*podClaims](state, claimsKey); ok {
		return c
	}
	return pl.claimsOf(pod)
}

// allToAllocate reports whether every claim of the pod is known and still
// to allocate, and the pod asks for no extended resources (which DRA or a
// device plugin may serve): the pods whose devices node pruning and the
// dry runs can follow.
func allToAllocate(pod *v1.Pod, claims *podClaims) bool {
	return claims.unknown == 0 && claims.allocated == 0 && len(claims.toAllocate) > 0 && !requestsExtendedResources(pod)
}

// claimsUnchanged reports whether the claims DRAScope read before upstream's
// PreFilter are what upstream worked with: still unallocated, at the same
// resource version, and without an allocation in flight. A claim another
// pod allocated in between (its binding wrote it), or one a pod of the same
// group is allocating (upstream's Filter then checks that pending
// allocation's node, not a free device), would make a need of a claim that
// needs nothing.
func (pl *DRAScope) claimsUnchanged(claims *podClaims) bool {
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil {
			return false
		}
		now, err := pl.claims.Get(claim.Namespace, claim.Name)
		if err != nil || now.ResourceVersion != claim.ResourceVersion || now.Status.Allocation != nil {
			return false
		}
	}
	return true
}

// mayPreempt reports whether the pod may preempt others.
func mayPreempt(pod *v1.Pod) bool {
	return pod.Spec.PreemptionPolicy == nil || *pod.Spec.PreemptionPolicy != v1.PreemptNever
}

// requestsExtendedResources reports whether the pod asks for an extended
// resource, in a container or at pod level: one a device plugin serves, or
// one DRA may serve through a device class, by the class's
// extendedResourceName or its implicit deviceclass.resource.kubernetes.io/
// name (which IsExtendedResourceName does not count, being in the
// kubernetes.io domain; upstream's schedutil.IsDRAExtendedResourceName
// does).
func requestsExtendedResources(pod *v1.Pod) bool {
	extended := func(list v1.ResourceList) bool {
		for name := range list {
			if schedutil.IsDRAExtendedResourceName(name) {
				return true
			}
		}
		return false
	}
	if pod.Spec.Resources != nil && (extended(pod.Spec.Resources.Requests) || extended(pod.Spec.Resources.Limits)) {
		return true
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if extended(containers[i].Resources.Requests) || extended(containers[i].Resources.Limits) {
				return true
			}
		}
	}
	return false
}
