package drascope

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
)

// maxWithheldInMessage bounds how many withheld devices one node's
// rejection names; the rest are counted.
const maxWithheldInMessage = 3

// Filter runs upstream's Filter. When it refuses the node while devices the
// node can reach are withheld as Unhealthy, the refusal says so, naming the
// devices, when and by which pod they were reported, and the pod is
// remembered so that it is retried as soon as one of them recovers.
func (pl *DRAScope) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	status := pl.DynamicResources.Filter(ctx, state, pod, nodeInfo)
	if !status.IsRejected() || pl.withheld == nil {
		return status
	}
	note := pl.withheldNote(nodeInfo.Node())
	if note == "" {
		return status
	}
	pl.shared.waiting.add(pod)
	return fwk.NewStatus(status.Code(), append(status.Reasons(), note)...)
}

// withheldNote describes the Unhealthy devices that node can reach: those
// reported from the node, and those of pools not tied to one node.
func (pl *DRAScope) withheldNote(node *v1.Node) string {
	if node == nil {
		return ""
	}
	var reachable []health.Report
	for _, r := range pl.shared.health.Unhealthy() {
		if r.Node == node.Name || pl.networkAttached(r.Device) {
			reachable = append(reachable, r)
		}
	}
	if len(reachable) == 0 {
		return ""
	}
	slices.SortFunc(reachable, func(a, b health.Report) int { return strings.Compare(a.Device.String(), b.Device.String()) })
	parts := make([]string, 0, maxWithheldInMessage+1)
	for i, r := range reachable {
		if i == maxWithheldInMessage {
			parts = append(parts, fmt.Sprintf("and %d more", len(reachable)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", r.Device, r.Detail()))
	}
	return "had devices withheld because kubelet reported them Unhealthy: " + strings.Join(parts, ", ")
}

// networkAttached reports whether a device's pool is not tied to one node.
func (pl *DRAScope) networkAttached(d health.Device) bool {
	snap := pl.shared.pools.Get(drausage.PoolID{Driver: d.Driver, Pool: d.Pool})
	return snap != nil && snap.NodeName == ""
}

// isSchedulableAfterHealthReport is the queueing hint for status updates of
// running pods: a new Healthy report may free a device a waiting pod needs.
// The health cache gets the report through its own informer handler, which
// may run after the retry; it then retries the waiting pods itself
// (schedulerState.healthChanged), so a retry that came too early is repeated.
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

// waitingPods are the pods Filter refused while devices were withheld as
// Unhealthy; they are retried when a device recovers, even when no API
// event announces it (the end of a hold time).
type waitingPods struct {
	activator fwk.PodActivator
	mu        sync.Mutex
	pods      map[types.UID]*v1.Pod
}

func newWaitingPods(activator fwk.PodActivator) *waitingPods {
	return &waitingPods{activator: activator, pods: map[types.UID]*v1.Pod{}}
}

func (w *waitingPods) add(pod *v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[pod.UID] = pod
}

// activate retries every waiting pod and forgets them: a pod refused again
// is added again by Filter. Pods that were deleted or scheduled meanwhile
// are ignored by the scheduling queue.
func (w *waitingPods) activate(logger klog.Logger) {
	w.mu.Lock()
	if len(w.pods) == 0 {
		w.mu.Unlock()
		return
	}
	pods := make(map[string]*v1.Pod, len(w.pods))
	for _, pod := range w.pods {
		pods[pod.Namespace+"/"+pod.Name] = pod
	}
	clear(w.pods)
	w.mu.Unlock()
	logger.V(3).Info("A withheld device is no longer Unhealthy, retrying the pods that waited for one", "pods", len(pods))
	w.activator.Activate(logger, pods)
}
