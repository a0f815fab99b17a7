package drascope

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/poolcache"
)

// maxWithheldInMessage bounds how many withheld devices a pending pod's
// message names; the rest are counted.
const maxWithheldInMessage = 3

// withheldReason is how Filter refuses a node that reaches withheld
// devices. It is the same for every node, so that the scheduler's message
// counts the nodes ("37 had devices withheld ...") rather than listing
// each: upstream's FitError names every distinct reason, and a reason
// naming each node's own devices would grow the pod's status with the
// cluster. PostFilter names a few of the devices, once (withheldNote).
const withheldReason = "had devices withheld because kubelet reported them Unhealthy"

// filterExplained runs upstream's Filter. A refusal of a pod that needs
// admin-access and ordinary requests allocated together says that its
// admin access counts shared counters (adminaccess_counters.go). When it
// refuses the node while devices the node can reach are withheld as
// Unhealthy, the refusal says so (withheldReason; PostFilter names the
// devices, when and by which pod they were reported), and the pod is
// remembered so that it is retried as soon as one of them recovers.
func (pl *DRAScope) filterExplained(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
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
	reason := pl.withheldReasonFor(ctx, pl.withheldIn(state), nodeInfo.Node())
	if reason == "" {
		return status
	}
	pl.waiting.RetryWhenDevicesFree(pod)
	return fwk.NewStatus(status.Code(), append(status.Reasons(), reason)...)
}

// withheldReasonFor is Filter's reason for refusing a node that reaches
// withheld devices the pod could use; "" when it reaches none.
func (pl *DRAScope) withheldReasonFor(ctx context.Context, w *withheldDevices, node *v1.Node) string {
	if node == nil {
		return ""
	}
	pl.withheldFrom(ctx, w) // groups them, once
	if len(w.byNode[node.Name]) == 0 && len(w.anyNode) == 0 {
		return ""
	}
	return withheldReason
}

// withheldSummary names the devices withheld on the nodes Filter refused
// with withheldReason, for PostFilter's message; "" when there are none.
// Only the nodes that report withheld devices are looked up.
func (pl *DRAScope) withheldSummary(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) string {
	w, ok := fromCycle[*withheldDevices](state, withheldStateKey)
	if pl.health == nil || !ok || statuses == nil {
		return ""
	}
	pl.withheldFrom(ctx, w)
	refusedFor := func(name string) bool {
		status := statuses.Get(name)
		return status != nil && slices.Contains(status.Reasons(), withheldReason)
	}
	var nodes []string
	for name := range w.byNode {
		if refusedFor(name) {
			nodes = append(nodes, name)
		}
	}
	if len(nodes) == 0 && len(w.anyNode) > 0 {
		// Network-attached devices only: any refused node reached them.
		all, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return ""
		}
		for _, info := range all {
			if node := info.Node(); node != nil && refusedFor(node.Name) {
				nodes = append(nodes, node.Name)
				break
			}
		}
	}
	return pl.withheldNote(ctx, w, pod, nodes...)
}

// withheldStateKey holds a scheduling cycle's withheldDevices.
const withheldStateKey fwk.StateKey = Name + "/withheld"

// withheldDevices are the Unhealthy devices as one scheduling cycle sees
// them, those the pod's claims could use, grouped by the node that reports
// them. Filter runs for every node,
// and a pod that does not fit is refused by most of them: scanning every
// Unhealthy device for each refusal cost a fifth of the test process's CPU in
// scheduler_perf's UnhealthyDevices workload (docs/perf.md). The grouping is
// made once, at the cycle's first refusal; Filter runs in parallel, hence
// the sync.Once.
type withheldDevices struct {
	// claims are the pod's, which PreFilter gathered; nil when unknown,
	// and then every withheld device is named.
	claims *podClaims

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
	if w, ok := fromCycle[*withheldDevices](state, withheldStateKey); ok {
		return w
	}
	return &withheldDevices{}
}

// withheldNote describes the Unhealthy devices the nodes can reach (those
// reported from them, and those of pools not tied to one node) and that a
// device class the pod asks for accepts: a pod waiting for a NIC is not
// told about a withheld GPU. It names at most maxWithheldInMessage and
// counts the rest. The note lands in the pod's status and events: it names
// a reporting pod only of the pod's own namespace.
func (pl *DRAScope) withheldNote(ctx context.Context, w *withheldDevices, pod *v1.Pod, nodes ...string) string {
	reachable := pl.withheldFrom(ctx, w, nodes...)
	if len(reachable) == 0 {
		return ""
	}
	parts := make([]string, 0, maxWithheldInMessage+1)
	for i, r := range reachable {
		if i == maxWithheldInMessage {
			parts = append(parts, fmt.Sprintf("and %d more", len(reachable)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", r.Device, r.DetailFor(pod.Namespace)))
	}
	return "devices withheld because kubelet reported them Unhealthy: " + strings.Join(parts, ", ")
}

// withheldFrom returns, sorted, the withheld devices the nodes reach that
// the pod's classes accept, grouping them at the cycle's first call.
func (pl *DRAScope) withheldFrom(ctx context.Context, w *withheldDevices, nodes ...string) []health.Report {
	w.once.Do(func() {
		w.byNode = map[string][]health.Report{}
		classes := pl.requestedClasses(w.claims)
		devices := poolDevices{}
		for _, r := range pl.health.Unhealthy() {
			if classes != nil && (len(classes) == 0 || !devices.anyAccepts(ctx, pl.pools, classes, r.Device)) {
				continue
			}
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
	if len(nodes) == 0 {
		return nil
	}
	if len(nodes) == 1 && len(w.anyNode) == 0 {
		return w.byNode[nodes[0]]
	}
	var reachable []health.Report
	for _, name := range nodes {
		reachable = append(reachable, w.byNode[name]...)
	}
	reachable = append(reachable, w.anyNode...)
	slices.SortFunc(reachable, byDevice)
	return reachable
}

// requestedClasses are the device classes the claims' requests name, every
// alternative of a prioritized list included: empty when no claim is left
// to allocate, and then no withheld device concerns the pod; nil when that
// is not known (no claims gathered, claims that could not be read, a class
// not found), and then none is left out.
func (pl *DRAScope) requestedClasses(claims *podClaims) []*resourceapi.DeviceClass {
	if claims == nil || claims.unknown > 0 || pl.classes == nil {
		return nil
	}
	classes := []*resourceapi.DeviceClass{}
	add := func(name string) bool {
		class, err := pl.classes.Get(name)
		if err != nil {
			return false
		}
		classes = append(classes, class)
		return true
	}
	for _, claim := range claims.toAllocate {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil && !add(request.Exactly.DeviceClassName) {
				return nil
			}
			for _, sub := range request.FirstAvailable {
				if !add(sub.DeviceClassName) {
					return nil
				}
			}
		}
	}
	return classes
}

// poolDevices are the devices of the pools one cycle looked up, by name, as
// the side cache's slices of the pool's generation publish them: the
// Unhealthy devices of a pool share one lookup.
type poolDevices map[drausage.PoolID]map[string]*resourceapi.Device

// anyAccepts reports whether one of the classes accepts the device; true
// when the device is not in the side cache.
func (p poolDevices) anyAccepts(ctx context.Context, pools *poolcache.Cache, classes []*resourceapi.DeviceClass, d health.Device) bool {
	id := drausage.PoolID{Driver: d.Driver, Pool: d.Pool}
	byName, ok := p[id]
	if !ok {
		byName = map[string]*resourceapi.Device{}
		if snap := pools.Get(id); snap != nil {
			for _, slice := range pools.Slices(id) {
				if slice.Spec.Pool.Generation != snap.Generation {
					continue
				}
				for i := range slice.Spec.Devices {
					byName[slice.Spec.Devices[i].Name] = &slice.Spec.Devices[i]
				}
			}
		}
		p[id] = byName
	}
	device, ok := byName[d.Name]
	if !ok {
		return true
	}
	for _, class := range classes {
		if deviceclass.Accepts(ctx, class, d.Driver, device) {
			return true
		}
	}
	return false
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
