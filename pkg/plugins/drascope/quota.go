package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/devicequota"
)

// quotaRuntime is what DeviceQuotas' enforcement needs of the
// scheduler-wide runtime (pkg/draruntime).
type quotaRuntime interface {
	DeviceQuotas(namespace string) ([]*v1alpha1.DeviceQuota, bool)
	RetryWhenQuotaChanges(*v1.Pod)
	RetryQuotaWaiters(logger klog.Logger, namespace string)
}

// quotaExceeded refuses the pod when the allocations Reserve just put in
// flight for it (added) would take its namespace over a DeviceQuota
// (pkg/devicequota). Every other allocation of the namespace counts as the
// side cache has it, in flight included, and Reserve runs one pod at a
// time, so two pods scheduled one after the other cannot both take the
// last unit. A refused pod is retried when its namespace's quotas change,
// or an allocation there is given up or released.
func (pl *DRAScope) quotaExceeded(ctx context.Context, pod *v1.Pod, added sets.Set[types.UID]) *fwk.Status {
	if pl.quotas == nil || pl.pools == nil || added.Len() == 0 {
		return nil
	}
	quotas, enforced := pl.quotas.DeviceQuotas(pod.Namespace)
	if !enforced || len(quotas) == 0 {
		return nil
	}
	used, adding := devicequota.Usage{}, devicequota.Usage{}
	for _, claim := range pl.pools.AllocatedIn(pod.Namespace) {
		usage := devicequota.OfAllocation(claim, claim.Status.Allocation, pl.pools.Device)
		if added.Has(claim.UID) {
			adding.Add(usage)
		} else {
			used.Add(usage)
		}
	}
	excess, over := devicequota.Check(quotas, used, adding)
	if !over {
		return nil
	}
	klog.FromContext(ctx).V(4).Info("A DeviceQuota refused the pod's allocation", "pod", klog.KObj(pod), "excess", excess.String())
	pl.quotas.RetryWhenQuotaChanges(pod)
	return fwk.NewStatus(fwk.Unschedulable, excess.String())
}
