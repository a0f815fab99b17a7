package drascope

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
)

// maxWithheldInMessage bounds how many withheld devices one node's
// rejection names; the rest are counted.
const maxWithheldInMessage = 3

// Filter runs upstream's Filter. A refusal of a pod that needs admin-access
// and ordinary requests allocated together says that its admin access
// counts shared counters (adminaccess_counters.go). When it refuses the node
// while devices the node can reach are withheld as Unhealthy, the refusal
// says so, naming the devices, when and by which pod they were reported,
// and the pod is remembered so that it is retried as soon as one of them
// recovers.
func (pl *DRAScope) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	status := pl.DynamicResources.Filter(ctx, state, pod, nodeInfo)
	if !status.IsRejected() {
		return status
	}
	if note := mixedAdminAccessNote(state); note != "" {
		status = fwk.NewStatus(status.Code(), append(status.Reasons(), note)...)
	}
	if pl.health == nil {
		return status
	}
	note := pl.withheldIn(state).note(pl, nodeInfo.Node())
	if note == "" {
		return status
	}
	pl.waiting.RetryWhenDeviceRecovers(pod)
	return fwk.NewStatus(status.Code(), append(status.Reasons(), note)...)
}

// withheldStateKey holds a scheduling cycle's withheldDevices.
const withheldStateKey fwk.StateKey = Name + "/withheld"

// withheldDevices are the Unhealthy devices as one scheduling cycle sees
// them, grouped by the node that reports them. Filter runs for every node,
// and a pod that does not fit is refused by most of them: scanning every
// Unhealthy device for each refusal cost a fifth of the test process's CPU in
// scheduler_perf's UnhealthyDevices workload (docs/perf.md). The grouping is
// made once, at the cycle's first refusal; Filter runs in parallel, hence
// the sync.Once.
type withheldDevices struct {
	once sync.Once
	// byNode are the node-local devices; anyNode those of pools not tied
	// to one node, which every node can reach. Each is sorted by device.
	byNode  map[string][]health.Report
	anyNode []health.Report
}

// Clone shares the grouping: it is computed once and then only read.
func (w *withheldDevices) Clone() fwk.StateData { return w }

// withheldIn returns the cycle's withheldDevices, written by PreFilter, or a
// fresh one for a Filter called without it.
func (pl *DRAScope) withheldIn(state fwk.CycleState) *withheldDevices {
	if state != nil {
		if data, err := state.Read(withheldStateKey); err == nil {
			if w, ok := data.(*withheldDevices); ok {
				return w
			}
		}
	}
	return &withheldDevices{}
}

// note describes the Unhealthy devices that node can reach: those reported
// from the node, and those of pools not tied to one node.
func (w *withheldDevices) note(pl *DRAScope, node *v1.Node) string {
	if node == nil {
		return ""
	}
	w.once.Do(func() {
		w.byNode = map[string][]health.Report{}
		for _, r := range pl.health.Unhealthy() {
			if pl.networkAttached(r.Device) {
				w.anyNode = append(w.anyNode, r)
			} else {
				w.byNode[r.Node] = append(w.byNode[r.Node], r)
			}
		}
		slices.SortFunc(w.anyNode, byDevice)
		for _, reports := range w.byNode {
			slices.SortFunc(reports, byDevice)
		}
	})
	reachable := w.byNode[node.Name]
	if len(w.anyNode) > 0 {
		reachable = slices.Concat(reachable, w.anyNode)
		slices.SortFunc(reachable, byDevice)
	}
	if len(reachable) == 0 {
		return ""
	}
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

func byDevice(a, b health.Report) int {
	return a.Device.Compare(b.Device)
}

// networkAttached reports whether a device's pool is not tied to one node.
func (pl *DRAScope) networkAttached(d health.Device) bool {
	snap := pl.pools.Get(drausage.PoolID{Driver: d.Driver, Pool: d.Pool})
	return snap != nil && snap.NodeName == ""
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
