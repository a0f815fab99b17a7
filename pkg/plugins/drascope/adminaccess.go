package drascope

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// adminAccessLabelValue is the value the apiserver requires for
// resourceapi.DRAAdminNamespaceLabelKey.
const adminAccessLabelValue = "true"

// checkAdminAccess refuses a pod when a claim it still needs allocated asks
// for admin access that this scheduler must not grant: the DRAAdminAccess
// gate is off, or (with requireNamespaceLabel) the claim's namespace lacks the
// admin-access label. Allocated claims are left alone: the guard is about
// handing out new access, not about taking it away.
func (pl *DRAScope) checkAdminAccess(ctx context.Context, pod *v1.Pod, claims *podClaims) *fwk.Status {
	if pl.adminAccessEnabled && !pl.requireNamespaceLabel {
		return nil
	}
	logger := klog.FromContext(ctx)
	// Claims that are missing are not among them: upstream's PreFilter,
	// which ran first, already refused such pods.
	for _, claim := range claims.toAllocate {
		request := firstAdminAccessRequest(claim)
		if request == "" {
			continue
		}
		if !pl.adminAccessEnabled {
			msg := fmt.Sprintf("claim %s, request %s: admin access is requested, but the DRAAdminAccess feature gate is disabled in this scheduler", klog.KObj(claim), request)
			logger.V(3).Info("Refusing admin access", "pod", klog.KObj(pod), "resourceclaim", klog.KObj(claim), "request", request, "reason", "feature gate DRAAdminAccess disabled")
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
		}
		if msg := pl.namespaceLabelProblem(claim.Namespace); msg != "" {
			logger.V(3).Info("Refusing admin access", "pod", klog.KObj(pod), "resourceclaim", klog.KObj(claim), "request", request, "reason", msg)
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("claim %s, request %s: admin access %s", klog.KObj(claim), request, msg))
		}
	}
	return nil
}

// namespaceLabelProblem says what is wrong with the namespace for admin
// access, or "" when it carries the label.
func (pl *DRAScope) namespaceLabelProblem(namespace string) string {
	ns, err := pl.namespaces.Get(namespace)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("requires namespace %s, which the scheduler has not seen yet", namespace)
	case err != nil:
		return fmt.Sprintf("cannot be checked: reading namespace %s: %v", namespace, err)
	case !hasAdminAccessLabel(ns):
		return fmt.Sprintf("requires the label %s=%q on namespace %s (kubectl label namespace %s %s=%s)",
			resourceapi.DRAAdminNamespaceLabelKey, adminAccessLabelValue, namespace,
			namespace, resourceapi.DRAAdminNamespaceLabelKey, adminAccessLabelValue)
	}
	return ""
}

// firstAdminAccessRequest returns the name of the first request of claim that
// asks for admin access, or "". Only exact requests can: the API has no admin
// access on prioritized-list subrequests.
func firstAdminAccessRequest(claim *resourceapi.ResourceClaim) string {
	for _, request := range claim.Spec.Devices.Requests {
		if request.Exactly != nil && ptr.Deref(request.Exactly.AdminAccess, false) {
			return request.Name
		}
	}
	return ""
}

// retryWhenNamespaceLabelled activates this profile's waiting pods in a
// namespace that has just gained the admin-access label, so that pods refused
// for lacking it are retried at once rather than after the unschedulable-pods
// timeout.
//
// This is an event handler on the scheduler's typed Namespace informer, the
// same cache namespaceLabelProblem reads, not a queueing hint: the scheduler
// delivers events for resources it has no typed informer for (Namespaces)
// from a separate dynamic informer, and a pod requeued by that event could be
// retried, and refused again, before the typed cache had the label. An
// informer updates its cache before it calls handlers, so here the retry
// always sees the label.
func (pl *DRAScope) retryWhenNamespaceLabelled(logger klog.Logger, oldObj, newObj interface{}) {
	ns, ok := newObj.(*v1.Namespace)
	if !ok || !hasAdminAccessLabel(ns) {
		return
	}
	if old, ok := oldObj.(*v1.Namespace); ok && hasAdminAccessLabel(old) {
		return
	}
	pods, err := pl.pods.Pods(ns.Name).List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing pods to retry after the namespace gained the admin-access label", "namespace", ns.Name)
		return
	}
	waiting := map[string]*v1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" && pod.Spec.SchedulerName == pl.profileName && len(pod.Spec.ResourceClaims) > 0 {
			waiting[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if len(waiting) == 0 {
		return
	}
	logger.V(3).Info("Namespace gained the admin-access label, retrying its waiting pods", "namespace", ns.Name, "pods", len(waiting))
	pl.activator.Activate(logger, waiting)
}

func hasAdminAccessLabel(ns *v1.Namespace) bool {
	return ns.Labels[resourceapi.DRAAdminNamespaceLabelKey] == adminAccessLabelValue
}
