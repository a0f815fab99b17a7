package drascope

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/victims"
)

// EventsToRegister adds, to upstream's events, deletions of pods that held
// claims (a preemptor's victims) and, when devices are withheld, status
// updates of running pods: kubelet's Healthy reports may free a withheld
// device.
func (pl *DRAScope) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	events, err := pl.DynamicResources.EventsToRegister(ctx)
	if err != nil || pl.manager == nil {
		return events, err
	}
	events = append(events, fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete},
		QueueingHintFn: pl.isSchedulableAfterVictimGone,
	})
	if pl.health == nil {
		return events, nil
	}
	return append(events, fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update},
		QueueingHintFn: pl.isSchedulableAfterHealthReport,
	}), nil
}

// isSchedulableAfterVictimGone retries a pod nominated to a node (a
// preemptor) when a pod that held claims there is deleted, and a pod of
// higher priority than a preempted pod that held claims when that one is
// deleted: it may have been its victim. DefaultPreemption gates a
// preemptor while its preemption runs and, once it has, lets only
// deletions of assigned pods un-gate it, leaving whether to retry to the
// plugins that rejected the pod; upstream's DynamicResources registers no
// such event, so without this a preemptor gated that way would wait for
// the unschedulable pods' flush (five minutes). The retry may come before
// the victim's claims are released; PostFilter then keeps the pod waiting,
// and the deallocation retries it.
func (pl *DRAScope) isSchedulableAfterVictimGone(logger klog.Logger, pod *v1.Pod, oldObj, _ interface{}) (fwk.QueueingHint, error) {
	gone, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if gone.Spec.NodeName == "" || len(gone.Spec.ResourceClaims) == 0 {
		return fwk.QueueSkip, nil
	}
	// The nomination may not be in the pod's status yet when its victim's
	// deletion arrives; the victim's DisruptionTarget condition, written
	// before the deletion, says it was preempted. (The scheduler's
	// nominator cannot be asked here: hints run under the queue's lock,
	// which NominatedPodsForNode takes too.)
	if pod.Status.NominatedNodeName != gone.Spec.NodeName && !(victims.Preempted(gone) && corev1helpers.PodPriority(gone) < corev1helpers.PodPriority(pod)) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("A pod holding claims left a node the pod may be waiting for", "pod", klog.KObj(pod), "deleted", klog.KObj(gone), "node", gone.Spec.NodeName)
	return fwk.Queue, nil
}

// isSchedulableAfterHealthReport is the queueing hint for status updates of
// running pods: a new Healthy report may free a device a waiting pod needs.
// The health cache gets the report through its own informer handler, which
// may run after the retry; it then retries the waiting pods itself
// (pkg/draruntime), so a retry that came too early is repeated.
func (pl *DRAScope) isSchedulableAfterHealthReport(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldPod, _ := oldObj.(*v1.Pod)
	newPod, ok := newObj.(*v1.Pod)
	if !ok {
		return fwk.QueueSkip, fmt.Errorf("expected a pod, got %T", newObj)
	}
	if health.NewHealthyReports(oldPod, newPod) {
		logger.V(5).Info("A device was reported Healthy, which may make the pod schedulable", "pod", klog.KObj(pod), "reportedBy", klog.KObj(newPod))
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// retryWhenNamespaceLabelled activates this profile's waiting pods in a
// namespace that has just gained the admin-access label, so that pods refused
// for lacking it are retried at once rather than after the unschedulable-pods
// timeout.
//
// This is an event handler on the scheduler's typed Namespace informer, the
// same cache the admin-access guard reads, not a queueing hint: the
// scheduler delivers events for resources it has no typed informer for
// (Namespaces) from a separate dynamic informer, and a pod requeued by that
// event could be retried, and refused again, before the typed cache had the
// label. An informer updates its cache before it calls handlers, so here the
// retry always sees the label.
func (pl *DRAScope) retryWhenNamespaceLabelled(logger klog.Logger, oldObj, newObj interface{}) {
	ns, ok := adminaccess.NewlyLabelled(oldObj, newObj)
	if !ok {
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
