package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/devicequota"
	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/gangpreempt"
	"github.com/drascope/drascope/pkg/whatif"
)

// quotaRuntime is what DeviceQuotas' enforcement needs of the
// scheduler-wide runtime (pkg/draruntime).
type quotaRuntime interface {
	DeviceQuotas(namespace string) ([]*v1alpha1.DeviceQuota, bool)
	QuotaNow(namespace string) draruntime.QuotaSeen
	QuotaReserved() uint64
	RetryWhenQuotaChanges(logger klog.Logger, pod *v1.Pod, seen draruntime.QuotaSeen)
	RetryQuotaWaiters(logger klog.Logger, givenUp *v1.Pod, reserved uint64)
	NamespaceUsage(namespace string, apart func(*resourceapi.ResourceClaim) bool) (others, selected devicequota.Usage)
}

// quotaExceeded refuses the pod when the allocations Reserve just put in
// flight for it (added) would take its namespace over a DeviceQuota
// (pkg/devicequota). Every other allocation of the namespace counts as the
// side cache has it, in flight included, and Reserve runs one pod at a
// time, so two pods scheduled one after the other cannot both take the
// last unit. A refused pod is retried when its namespace's quotas change,
// or an allocation there is given up or released; allocations let in are
// marked (quotaReservedKey), so that Unreserve retries only the pods that
// counted them.
func (pl *DRAScope) quotaExceeded(ctx context.Context, state fwk.CycleState, pod *v1.Pod, added sets.Set[types.UID]) *fwk.Status {
	if pl.quotas == nil || pl.pools == nil || added.Len() == 0 {
		return nil
	}
	seen := pl.quotas.QuotaNow(pod.Namespace)
	quotas, enforced := pl.quotas.DeviceQuotas(pod.Namespace)
	if !enforced || len(quotas) == 0 {
		return nil
	}
	used, adding := pl.quotas.NamespaceUsage(pod.Namespace, func(claim *resourceapi.ResourceClaim) bool { return added.Has(claim.UID) })
	excess, over := devicequota.Check(quotas, used, adding)
	if !over {
		state.Write(quotaReservedKey, quotaReservedData{epoch: pl.quotas.QuotaReserved()})
		return nil
	}
	logger := klog.FromContext(ctx)
	logger.V(4).Info("A DeviceQuota refused the pod's allocation", "pod", klog.KObj(pod), "excess", excess.String())
	pl.quotas.RetryWhenQuotaChanges(logger, pod, seen)
	return fwk.NewStatus(fwk.Unschedulable, excess.String())
}

// quotaForbidsPreemption says, for a pod no node fits, when its namespace's
// DeviceQuotas would refuse it even after preemption freed every device
// that pods of its own namespace with lower priority hold: preemption would
// then evict pods (of other namespaces too) for a pod that Reserve refuses
// anyway. Only what is certain counts as the pod's need
// (devicequota.NeedOf).
// A pod it stops is retried as Reserve's refusals are.
func (pl *DRAScope) quotaForbidsPreemption(ctx context.Context, pod *v1.Pod, claims []*resourceapi.ResourceClaim) (devicequota.Excess, bool) {
	if pl.quotas == nil || pl.pools == nil || pl.pods == nil {
		return devicequota.Excess{}, false
	}
	need := devicequota.NeedOf(claims)
	if len(need) == 0 {
		return devicequota.Excess{}, false
	}
	seen := pl.quotas.QuotaNow(pod.Namespace)
	quotas, enforced := pl.quotas.DeviceQuotas(pod.Namespace)
	if !enforced || len(quotas) == 0 {
		return devicequota.Excess{}, false
	}
	lower := sets.New[types.UID]()
	if pods, err := pl.pods.Pods(pod.Namespace).List(labels.Everything()); err == nil {
		for _, other := range pods {
			if corev1helpers.PodPriority(other) < corev1helpers.PodPriority(pod) {
				lower.Insert(other.UID)
			}
		}
	}
	// What pods of lower priority alone hold, preemption may free.
	used, _ := pl.quotas.NamespaceUsage(pod.Namespace, func(claim *resourceapi.ResourceClaim) bool { return heldOnlyBy(claim, lower) })
	excess, over := devicequota.Check(quotas, used, need)
	if over {
		pl.quotas.RetryWhenQuotaChanges(klog.FromContext(ctx), pod, seen)
	}
	return excess, over
}

// quotaRefusesVictims says, in a preemption's dry run that removed pods
// and found the pod's claims a fit (results, in the what-if's claim
// order), when the pod's namespace's DeviceQuotas would still refuse that
// allocation: only the claims the removed pods alone hold come off its
// namespace's usage. The preemption then keeps, of the victims it tries
// to spare, those of the pod's own namespace that the quota needs gone,
// and evicts no pod for an allocation its quota would refuse. A pod
// group's dry run is not checked: its removed pods are not the victims
// it frees (the group's real cycle checks).
func (pl *DRAScope) quotaRefusesVictims(ctx context.Context, pod *v1.Pod, w *whatif.WhatIf, results []resourceapi.AllocationResult) (string, bool) {
	if pl.quotas == nil || pl.pools == nil || len(w.Removed()) == 0 || len(results) != len(w.Claims()) || gangpreempt.From(ctx) != nil {
		return "", false
	}
	quotas, enforced := pl.quotas.DeviceQuotas(pod.Namespace)
	if !enforced || len(quotas) == 0 {
		return "", false
	}
	adding := devicequota.Usage{}
	for i, claim := range w.Claims() {
		adding.Add(devicequota.OfAllocation(claim, &results[i], pl.pools.Device))
	}
	gone := sets.KeySet(w.Removed())
	used, _ := pl.quotas.NamespaceUsage(pod.Namespace, func(claim *resourceapi.ResourceClaim) bool { return heldOnlyBy(claim, gone) })
	excess, over := devicequota.Check(quotas, used, adding)
	if !over {
		return "", false
	}
	klog.FromContext(ctx).V(5).Info("The victims tried leave the pod's DeviceQuota refusing it", "pod", klog.KObj(pod), "excess", excess.String())
	return "with these victims, " + excess.String(), true
}

// heldOnlyBy reports whether the claim is reserved, and only for pods of
// the set.
func heldOnlyBy(claim *resourceapi.ResourceClaim, pods sets.Set[types.UID]) bool {
	for _, consumer := range claim.Status.ReservedFor {
		if consumer.Resource != "pods" || !pods.Has(consumer.UID) {
			return false
		}
	}
	return len(claim.Status.ReservedFor) > 0
}

// steerByQuota hides from upstream's allocator, for this PreFilter, the
// devices the pod's namespace's DeviceQuotas could not take
// (devicequota.Steering), so that a request with alternatives is handed
// one that fits the quota rather than refused after allocation. Gang
// members are not steered: their plans choose devices for the whole
// group, and Reserve's check refuses what does not fit. A steered pod
// that no node fits is retried, as a refused one, when the quota changes
// (quotaSteeredKey): what it was not shown may then fit. The returned
// func stops hiding.
func (pl *DRAScope) steerByQuota(ctx context.Context, state fwk.CycleState, c *preFilterCycle) (stop func()) {
	none := func() {}
	if pl.quotas == nil || pl.pools == nil || pl.manager == nil || !c.gathered || c.pod.Spec.SchedulingGroup != nil || len(c.claims.toAllocate) == 0 {
		return none
	}
	seen := pl.quotas.QuotaNow(c.pod.Namespace)
	quotas, enforced := pl.quotas.DeviceQuotas(c.pod.Namespace)
	if !enforced || len(quotas) == 0 {
		return none
	}
	used := func() devicequota.Usage {
		others, _ := pl.quotas.NamespaceUsage(c.pod.Namespace, nil)
		return others
	}
	steering, ok := devicequota.Steer(quotas, used, c.claims.toAllocate)
	if !ok {
		return none
	}
	hidden := pl.hiddenByQuota(ctx, steering)
	if hidden.Len() == 0 {
		return none
	}
	klog.FromContext(ctx).V(5).Info("Hiding devices a DeviceQuota could not take", "pod", klog.KObj(c.pod), "devices", hidden.Len())
	state.Write(quotaSteeredKey, quotaSteeredData{seen: seen, note: steering.Note()})
	return pl.manager.Hide(hidden)
}

// hiddenByQuota are the devices the steering hides
// (devicequota.Steering.Hides), by the class selectors as the allocator
// evaluates them.
func (pl *DRAScope) hiddenByQuota(ctx context.Context, steering *devicequota.Steering) sets.Set[structured.DeviceID] {
	hidden := sets.New[structured.DeviceID]()
	listed, err := pl.manager.SharedDRAManager.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return hidden
	}
	// Each class looked up once, with the driver its selectors name, so
	// that another driver's devices cost no CEL evaluation.
	type known struct {
		class  *resourceapi.DeviceClass
		driver string
	}
	classes := map[string]known{}
	class := func(name string) known {
		k, ok := classes[name]
		if !ok {
			if c, err := pl.manager.DeviceClasses().Get(name); err == nil {
				k.class = c
				k.driver, _ = deviceclass.Driver(c)
			}
			classes[name] = k
		}
		return k
	}
	accepts := func(name string, slice *resourceapi.ResourceSlice, device *resourceapi.Device) bool {
		k := class(name)
		if k.class == nil || (k.driver != "" && k.driver != slice.Spec.Driver) {
			return false
		}
		return deviceclass.Accepts(ctx, k.class, slice.Spec.Driver, device)
	}
	for _, slice := range listed {
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			if steering.Hides(device, func(name string) bool { return accepts(name, slice, device) }) {
				hidden.Insert(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name))
			}
		}
	}
	return hidden
}
