package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/filtermemo"
	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/victims"
	"github.com/drascope/drascope/pkg/whatif"
	"github.com/drascope/drascope/pkg/withheld"
)

// cannotAllocate is upstream's Filter reason for claims the allocator
// found no devices for on a node; DRAScope's own refusals of a device
// shortage start with it too.
const cannotAllocate = "cannot allocate all claims"

// Filter answers a what-if itself (pkg/whatif); otherwise it refuses a
// node with too few free devices before upstream's search
// (whatif.TooFewDevices), answers through the filter memo, or runs
// upstream's Filter with drascope's explanations. It reports a device
// shortage that preempting pods of lower priority on the node could end as
// Unschedulable rather than UnschedulableAndUnresolvable, so that
// DefaultPreemption considers the node, and does not preempt again
// elsewhere while its victims on the node terminate.
func (pl *DRAScope) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	w := whatIfIn(state)
	if w.ReinstatedConflict() {
		return fwk.NewStatus(fwk.Unschedulable, "the pod group's preemption needs the devices of a pod it would spare")
	}
	if w != nil && w.Changed() {
		return pl.filterWhatIf(ctx, state, w, pod, nodeInfo)
	}
	var status *fwk.Status
	switch memo := memoIn(state); {
	case w.TooFewDevices(nodeInfo.Node()):
		status = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, cannotAllocate)
	case memo != nil:
		status = pl.filterMemoized(ctx, state, memo, pod, nodeInfo)
	default:
		status = pl.filterExplained(ctx, state, pod, nodeInfo)
	}
	if w != nil && status.Code() == fwk.UnschedulableAndUnresolvable && mayPreempt(pod) && whatif.LowerPriorityHold(pl.victimView(), pod, podsOf(nodeInfo), nil) {
		return fwk.NewStatus(fwk.Unschedulable, status.Reasons()...)
	}
	return status
}

// filterWhatIf checks whether the pod's claims fit on the node with the
// devices of the removed pods' claims free and those of the added pods'
// claims taken, and says why not.
func (pl *DRAScope) filterWhatIf(ctx context.Context, state fwk.CycleState, w *whatif.WhatIf, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	verdict := w.Fits(ctx, node, podsOf(nodeInfo))
	switch {
	case verdict.TimedOut:
		// One reason for every node, so that the pod's message counts
		// them; not an error, which preemption would list node by node.
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "timed out trying to allocate devices")
	case verdict.Err != nil:
		return fwk.AsStatus(verdict.Err)
	case verdict.Fit:
		if refusal, refused := pl.quotaRefusesVictims(ctx, pod, w, verdict.Results); refused {
			return fwk.NewStatus(fwk.Unschedulable, refusal)
		}
		return nil
	}
	reasons := []string{cannotAllocate}
	if len(w.Removed()) > 0 {
		reasons[0] += " even with the devices of the lower-priority pods on the node freed"
		if verdict.NetworkPools {
			// Preemption evicts pods of the candidate node only.
			reasons = append(reasons, "devices of network-attached pools that pods on other nodes hold are out of preemption's reach")
		}
	}
	if len(verdict.Nominated) > 0 {
		reasons = append(reasons, "devices are kept for pods nominated to the node: "+victims.SeenFrom(pod.Namespace, verdict.Nominated))
	}
	if pl.health != nil && withheldIn(state).Reaches(ctx, pl.withheldSource(), node.Name) {
		// As filterExplained: say so, retry on recovery.
		pl.waiting.RetryWhenDevicesFree(pod)
		reasons = append(reasons, withheld.Reason)
	}
	code := fwk.UnschedulableAndUnresolvable
	if mayPreempt(pod) && whatif.LowerPriorityHold(pl.victimView(), pod, podsOf(nodeInfo), w.Removed()) {
		code = fwk.Unschedulable
	}
	return fwk.NewStatus(code, reasons...)
}

// filterExplained runs upstream's Filter. A refusal of a pod that needs
// admin-access and ordinary requests allocated together says that its
// admin access counts shared counters (pkg/adminaccess). When it refuses
// the node while devices the node can reach are withheld as Unhealthy, the
// refusal says so (withheld.Reason; PostFilter names the devices, when and
// by which pod they were reported), and the pod is remembered so that it
// is retried as soon as one of them recovers.
func (pl *DRAScope) filterExplained(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	status := pl.DynamicResources.Filter(ctx, state, pod, nodeInfo)
	if !status.IsRejected() {
		return status
	}
	if _, mixed := fromCycle[mixedAdminData](state, mixedAdminKey); mixed {
		status = fwk.NewStatus(status.Code(), append(status.Reasons(), adminaccess.MixedNote())...)
	}
	if pl.health == nil || nodeInfo.Node() == nil || !withheldIn(state).Reaches(ctx, pl.withheldSource(), nodeInfo.Node().Name) {
		return status
	}
	pl.waiting.RetryWhenDevicesFree(pod)
	return fwk.NewStatus(status.Code(), append(status.Reasons(), withheld.Reason)...)
}

// filterMemoized runs Filter through the memo (pkg/filtermemo): a node
// accepted before with what this cycle's allocator reads for it is
// accepted without running upstream's Filter; one upstream's Filter
// accepts is remembered.
func (pl *DRAScope) filterMemoized(ctx context.Context, state fwk.CycleState, memo *filtermemo.Cycle, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if node == nil {
		return pl.filterExplained(ctx, state, pod, nodeInfo)
	}
	if memo.Accepts(node) {
		metrics.ObserveFilterMemo(metrics.FilterMemoAccepted)
		return nil
	}
	// The allocator looks the classes up for each node: they were these
	// when it ran if they are these before and after.
	classes, ok := memo.Classes()
	status := pl.filterExplained(ctx, state, pod, nodeInfo)
	metrics.ObserveFilterMemo(metrics.FilterMemoRan)
	if ok && status.IsSuccess() && memo.ClassesAre(classes) {
		memo.Accepted(node, classes)
	}
	return status
}
