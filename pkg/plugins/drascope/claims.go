package drascope

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	fwk "k8s.io/kube-scheduler/framework"
)

// podClaims are a pod's claims as a scheduling cycle starts: those still to
// allocate, how many are allocated, and how many could not be read (not
// created yet, or an error).
// PreFilter gathers them once; the admin-access guards, the counters
// workaround, node pruning and scoring read them, rather than each asking the claim
// tracker again.
type podClaims struct {
	toAllocate []*resourceapi.ResourceClaim
	unknown    int
	// allocated counts the claims allocated already.
	allocated int
	// refused counts the claims upstream's PreFilter refuses the pod
	// for whatever the devices: being deleted, or made from a template
	// for another pod (prunefirst.go).
	refused int
}

// Clone shares the claims: they are only read.
func (c *podClaims) Clone() fwk.StateData { return c }

const podClaimsKey fwk.StateKey = Name + "/claims"

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
	if c, ok := fromCycle[*podClaims](state, podClaimsKey); ok {
		return c
	}
	return pl.claimsOf(pod)
}
