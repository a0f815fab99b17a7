// Package victims says which devices become free when pods go: the claims
// only the pods going use (preemption's victims), and the devices already
// on their way out (claims whose pods are gone or preempted, which the
// resourceclaim controller is about to deallocate). DRA-aware preemption
// (pkg/plugins/drascope; docs/preemption.md) asks it in its dry runs, its
// release checks and a gang's preemption. It reads claims through the
// scheduler's claim tracker and pods through a lister, and knows nothing
// of the scheduler framework.
package victims

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/dryrun"
)

// Claims is what the scheduler's claim tracker (fwk.ResourceClaimTracker)
// answers about claims, with the allocations in flight.
type Claims interface {
	Get(namespace, name string) (*resourceapi.ResourceClaim, error)
	List() ([]*resourceapi.ResourceClaim, error)
	GetPendingAllocation(uid types.UID) *resourceapi.AllocationResult
}

// View reads claims and pods as the scheduler sees them now.
type View struct {
	Claims Claims
	// Pods are the scheduler's pods, to tell whether a claim's consumer
	// still runs (nil: every consumer runs).
	Pods corelisters.PodLister
	// InFlight are allocations in flight under a UID no listed claim has
	// (upstream's claim for extended resources backed by DRA, until
	// PreBind creates it); nil: none.
	InFlight func() []*resourceapi.AllocationResult
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

func (v View) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// ForEachClaim calls f with each of the pod's claims the scheduler knows.
func (v View) ForEachClaim(pod *v1.Pod, f func(*resourceapi.ResourceClaim)) {
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		if claim, err := v.Claims.Get(pod.Namespace, *name); err == nil {
			f(claim)
		}
	}
}

// ToAllocate returns the pod's claims the scheduler knows that are still to
// allocate (neither allocated nor in flight), other than those in own.
func (v View) ToAllocate(pod *v1.Pod, own []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	var toAllocate []*resourceapi.ResourceClaim
	v.ForEachClaim(pod, func(claim *resourceapi.ResourceClaim) {
		if claim.Status.Allocation != nil || v.Claims.GetPendingAllocation(claim.UID) != nil {
			return // its devices are in use already
		}
		if slices.ContainsFunc(own, func(c *resourceapi.ResourceClaim) bool { return c.UID == claim.UID }) ||
			slices.ContainsFunc(toAllocate, func(c *resourceapi.ResourceClaim) bool { return c.UID == claim.UID }) {
			return
		}
		toAllocate = append(toAllocate, claim)
	})
	return toAllocate
}

// FreedBy returns the allocations of the claims of pods that would be free
// if the pods in gone were: those that no other pod reserves, and that no
// pod in stay uses (one assumed on the node, whose reservation is not
// written yet, or one nominated to it). A claim reserved for no pod yet is
// freed only with the pod it was generated for.
func (v View) FreedBy(pods, gone map[types.UID]*v1.Pod, stay []*v1.Pod) []*resourceapi.AllocationResult {
	used := sets.New[types.UID]()
	for _, other := range stay {
		if _, ok := gone[other.UID]; !ok {
			v.ForEachClaim(other, func(claim *resourceapi.ResourceClaim) { used.Insert(claim.UID) })
		}
	}
	var freed []*resourceapi.AllocationResult
	for _, pod := range pods {
		v.ForEachClaim(pod, func(claim *resourceapi.ResourceClaim) {
			if used.Has(claim.UID) {
				return
			}
			used.Insert(claim.UID)
			allocation := claim.Status.Allocation
			if allocation == nil {
				allocation = v.Claims.GetPendingAllocation(claim.UID)
			}
			if allocation != nil && OnlyUsedBy(claim, gone) {
				freed = append(freed, allocation)
			}
		})
	}
	return freed
}

// OnlyUsedBy reports whether every consumer of the claim is one of pods.
func OnlyUsedBy(claim *resourceapi.ResourceClaim, pods map[types.UID]*v1.Pod) bool {
	if len(claim.Status.ReservedFor) == 0 {
		owner := metav1.GetControllerOf(claim)
		_, ok := pods[ptr.Deref(owner, metav1.OwnerReference{}).UID]
		return owner != nil && owner.Kind == "Pod" && ok
	}
	for _, consumer := range claim.Status.ReservedFor {
		if _, ok := pods[consumer.UID]; consumer.APIGroup != "" || consumer.Resource != "pods" || !ok {
			return false
		}
	}
	return true
}

// Release is what the claims, as the tracker shows them now, say of
// devices on their way out.
type Release struct {
	// Allocations are those of claims whose consumers are all gone: the
	// resourceclaim controller is about to deallocate them.
	Allocations []*resourceapi.AllocationResult
	// Held are the devices the claims hold, allocated or in flight; nil
	// when the claims could not be listed. The in-use set a cycle starts
	// from is upstream's allocated-devices tracker, which its own informer
	// handler updates, apart from the assume cache that lists the claims:
	// for a moment after a claim is deallocated or deleted, the in-use set
	// can still count devices no claim holds, while the claim no longer
	// shows them as releasing. Counted in use, they made a nominated
	// preemptor whose last victim's claim had just been deallocated look
	// short of devices: DefaultPreemption then found no candidate, cleared
	// its nomination, and a pod of lower priority took its devices (a
	// preemption soak seed with six cases at once). Those devices are free.
	Held sets.Set[structured.DeviceID]
}

// FreeOn marks the devices on their way out as free on a node's share,
// and reports whether any of them were in use there.
func (r Release) FreeOn(n *dryrun.Node) bool {
	freed := false
	for _, allocation := range r.Allocations {
		freed = n.Free(allocation) || freed
	}
	if r.Held != nil {
		freed = n.FreeAllBut(r.Held) || freed
	}
	return freed
}

// Releasing reads the claims as the tracker shows them now: the
// allocations of claims whose consumers are all gone (deleted, finished,
// or preempted), which the resourceclaim controller is about to
// deallocate, and every device a claim holds or is being allocated.
func (v View) Releasing() Release {
	claims, err := v.Claims.List()
	if err != nil {
		return Release{}
	}
	release := Release{Held: sets.New[structured.DeviceID]()}
	// Compared with upstream's in-use set of whole devices: a share holds
	// its device there unless every share is gone.
	holds := allocated.Visitor{Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) {
		release.Held.Insert(id)
	}}
	hold := func(allocation *resourceapi.AllocationResult) { allocated.Each(allocation, false, holds) }
	if v.InFlight != nil {
		for _, allocation := range v.InFlight() {
			hold(allocation)
		}
	}
	for _, claim := range claims {
		allocation := claim.Status.Allocation
		if allocation == nil {
			allocation = v.Claims.GetPendingAllocation(claim.UID)
		}
		if allocation == nil {
			// Listed before its allocation was assumed, asked after the
			// pending entry went (upstream assumes first, then removes):
			// the claim as it is now has it.
			if now, err := v.Claims.Get(claim.Namespace, claim.Name); err == nil && now.UID == claim.UID {
				allocation = now.Status.Allocation
			}
		}
		if allocation == nil {
			continue
		}
		hold(allocation)
		if claim.Status.Allocation != nil && len(claim.Status.ReservedFor) > 0 &&
			!slices.ContainsFunc(claim.Status.ReservedFor, v.consumerRuns(claim.Namespace)) {
			release.Allocations = append(release.Allocations, claim.Status.Allocation)
		}
	}
	return release
}

// consumerRuns reports whether a consumer may still use its claim: it is
// not a pod, or a pod that exists, has not finished, and was not preempted
// by the scheduler (within its grace period and GraceSlack). A victim on
// its way out frees its claims with it: counted in use, a preemptor whose
// cycle came while a nominated pod's victim still terminated chose a
// victim more for the device that victim was about to free.
func (v View) consumerRuns(namespace string) func(resourceapi.ResourceClaimConsumerReference) bool {
	return func(consumer resourceapi.ResourceClaimConsumerReference) bool {
		if consumer.APIGroup != "" || consumer.Resource != "pods" || v.Pods == nil {
			return true
		}
		pod, err := v.Pods.Pods(namespace).Get(consumer.Name)
		if err != nil {
			return false
		}
		return pod.UID == consumer.UID && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed &&
			!RecentlyPreempted(pod, v.now())
	}
}

// GraceSlack is how long after its grace period a preempted pod is still
// waited for.
const GraceSlack = 30 * time.Second

// RecentlyPreempted reports whether the scheduler marked the pod as
// preempted no longer ago than its grace period and GraceSlack.
func RecentlyPreempted(pod *v1.Pod, now time.Time) bool {
	i := slices.IndexFunc(pod.Status.Conditions, isPreemption)
	if i < 0 {
		return false
	}
	grace := time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, v1.DefaultTerminationGracePeriodSeconds)) * time.Second
	return now.Sub(pod.Status.Conditions[i].LastTransitionTime.Time) <= grace+GraceSlack
}

// Preempted reports whether the scheduler marked the pod as preempted.
func Preempted(pod *v1.Pod) bool {
	return slices.ContainsFunc(pod.Status.Conditions, isPreemption)
}

func isPreemption(c v1.PodCondition) bool {
	return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler
}

// DeviceClassesOf returns the device classes the claims' requests and
// their subrequests name.
func DeviceClassesOf(claims []*resourceapi.ResourceClaim) sets.Set[string] {
	classes := sets.New[string]()
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil {
				classes.Insert(request.Exactly.DeviceClassName)
			}
			for _, sub := range request.FirstAvailable {
				classes.Insert(sub.DeviceClassName)
			}
		}
	}
	return classes
}

// SeenFrom names pods for a reader in namespace (a pending pod's status and
// events): those of that namespace by name, the others only by their
// number, so that one tenant learns nothing of another's pods.
func SeenFrom(namespace string, pods []*v1.Pod) string {
	var names []string
	others := 0
	for _, pod := range pods {
		if pod.Namespace == namespace {
			names = append(names, klog.KObj(pod).String())
		} else {
			others++
		}
	}
	switch others {
	case 0:
	case 1:
		names = append(names, "a pod of another namespace")
	default:
		names = append(names, fmt.Sprintf("%d pods of other namespaces", others))
	}
	return strings.Join(names, ", ")
}
