package drascope

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/withheld"
)

// maxReleaseChecks bounds the nodes awaitingRelease tries.
const maxReleaseChecks = 16

// PostFilter runs upstream's (which frees allocated claims a pod cannot
// use), then keeps DefaultPreemption from running for a pod that would fit
// once devices already on their way out are free: devices of claims whose
// pods are all gone, which the resourceclaim controller is about to
// deallocate, or released since the cycle began. That is the window after
// a preemptor's victims are gone: the nominated node no longer has a
// terminating pod, so DefaultPreemption would find the pod eligible again
// and preempt more. A refusal names the request no node has enough free
// devices for, with the counts (shortageNote), and a few of the withheld
// devices that kept the pod off nodes (withheldSummary), once for the
// whole cycle: the pod's message and its FailedScheduling event carry
// them.
func (pl *DRAScope) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	result, status := pl.postFilter(ctx, state, pod, statuses)
	if status.IsRejected() {
		shortage, withheld := pl.shortageNote(ctx, state, pod, statuses), pl.withheldSummary(ctx, state, pod, statuses)
		if withheld != "" && shortage == nodeprune.TogetherNote {
			// Counting takes withheld devices for free: they, not the
			// claims together, stood in the way.
			shortage = ""
		}
		var steered string
		if d, ok := fromCycle[quotaSteeredData](state, quotaSteeredKey); ok {
			steered = d.note
		}
		for _, note := range []string{steered, shortage, withheld} {
			if note != "" {
				status = fwk.NewStatus(status.Code(), append(status.Reasons(), note)...)
			}
		}
	}
	return result, status
}

// shortageNote names the first request that no node the pod may run on
// has enough free devices for, with the counts (nodeprune.FindShortage),
// or, when no request is short by count, says that the claims failed
// together, but only if every node the pod may run on was refused for its
// claims: a pod refused elsewhere for CPU is not told about its devices.
// It is computed once per pod for nodeprune.ShortageTTL
// (nodeprune.Shortages).
func (pl *DRAScope) shortageNote(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) string {
	s, ok := fromCycle[*shortageState](state, shortageKey)
	if !ok || pl.handle == nil {
		return ""
	}
	return pl.shortages.Reason(pod.UID, func() (nodeprune.Shortage, bool) {
		nodes, err := pl.snapshotNodes()
		if err != nil {
			return nodeprune.Shortage{}, false
		}
		required := nodeaffinity.GetRequiredNodeAffinity(pod)
		allowed := nodes[:0:0]
		for _, node := range nodes {
			if ok, err := required.Match(node); ok && err == nil {
				allowed = append(allowed, node)
			}
		}
		shortage, ok := nodeprune.FindShortage(ctx, s.claims, pl.deviceClass, s.view, allowed)
		if ok && shortage.Together && !refusedForClaimsOnly(statuses, allowed) {
			return nodeprune.Shortage{}, false
		}
		return shortage, ok
	})
}

// retrySteered retries a pod that its DeviceQuotas hid devices from
// (steerByQuota), as a refused one, when a node or pruning refused it for
// its claims: what it was not shown may fit once the quota changes. A pod
// that every node refused for something else (CPU, affinity) waits for
// that.
func (pl *DRAScope) retrySteered(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) {
	steered, ok := fromCycle[quotaSteeredData](state, quotaSteeredKey)
	if !ok || pl.quotas == nil {
		return
	}
	if !refusedEarly(state) {
		nodes, err := pl.snapshotNodes()
		if err != nil || statuses == nil || !slices.ContainsFunc(nodes, func(node *v1.Node) bool { return refusedForClaims(statuses.Get(node.Name)) }) {
			return
		}
	}
	pl.quotas.RetryWhenQuotaChanges(klog.FromContext(ctx), pod, steered.seen)
}

// refusedForClaimsOnly reports whether every node was refused because the
// pod's claims cannot be allocated there: by Filter ("cannot allocate all
// claims"), by pruning, or left out by this plugin's PreFilter alone. A
// node refused by another plugin first (the framework stops at the first
// refusal) does not count.
func refusedForClaimsOnly(statuses fwk.NodeToStatusReader, nodes []*v1.Node) bool {
	if statuses == nil || len(nodes) == 0 {
		return false
	}
	for _, node := range nodes {
		if !refusedForClaims(statuses.Get(node.Name)) {
			return false
		}
	}
	return true
}

// leftOut is the reason a node left out by this plugin's PreFilter alone
// gets.
var leftOut = fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", []string{Name})

// refusedForClaims reports whether a node's status refuses it for the
// pod's claims (refusedForClaimsOnly).
func refusedForClaims(status *fwk.Status) bool {
	return status != nil && slices.ContainsFunc(status.Reasons(), func(reason string) bool {
		return strings.HasPrefix(reason, cannotAllocate) || reason == leftOut
	})
}

func (pl *DRAScope) postFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	pl.retrySteered(ctx, state, pod, statuses)
	if refusedEarly(state) {
		// Upstream's PreFilter did not run, so its PostFilter would find
		// no cycle state and fail. It would have nothing to do: the pod's
		// claims were all unallocated, its Filter never ran and it asks
		// for no extended resource (so there is no claim of upstream's
		// own to delete), which is when it answers this
		// (dynamicresources.go, deallocateOrDeletePodClaims). The release
		// check below is for nominated pods and for nodes refused as
		// Unschedulable, and an early refusal has neither.
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	result, status := pl.DynamicResources.PostFilter(ctx, state, pod, statuses)
	if status.Code() != fwk.Unschedulable {
		return result, status
	}
	// A nominated pod is checked even where preemption would look at no
	// node (PreFilter may have offered only its nominated node):
	// DefaultPreemption, finding no candidate, would clear its nomination.
	if !mayPreempt(pod) || (pod.Status.NominatedNodeName == "" && !preemptionMayLook(statuses, pl.handle)) {
		return result, status
	}
	if excess, over := pl.quotaForbidsPreemption(ctx, pod, pl.claimsIn(state, pod).toAllocate); over {
		klog.FromContext(ctx).V(4).Info("Not preempting: the pod's DeviceQuota would refuse it anyway", "pod", klog.KObj(pod), "excess", excess.String())
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "preemption would not help: "+excess.String())
	}
	if node := pl.awaitingRelease(ctx, state, pod, statuses); node != "" {
		klog.FromContext(ctx).V(4).Info("Not preempting: devices being released would make room", "pod", klog.KObj(pod), "node", node)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("waiting for devices on node %s to be released by pods that are gone", node))
	}
	return result, status
}

// preemptionMayLook reports whether DefaultPreemption would evaluate any
// node: only nodes refused as Unschedulable are candidates. On a full
// cluster of pods of equal priority none is, and the release check is
// skipped.
func preemptionMayLook(statuses fwk.NodeToStatusReader, h fwk.Handle) bool {
	if statuses == nil {
		return false
	}
	nodes, err := statuses.NodesForStatusCode(h.SnapshotSharedLister().NodeInfos(), fwk.Unschedulable)
	return err == nil && len(nodes) > 0
}

// awaitingRelease returns a node where the pod would fit with the devices
// on their way out free: its nominated node first, then the nodes of the
// claims whose pods are all gone. It reads the claims as they are now, not
// as the cycle began: a deallocation seen in between is a device free.
func (pl *DRAScope) awaitingRelease(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) string {
	w := whatIfIn(state)
	if w == nil {
		return ""
	}
	release := pl.victimView().Releasing()
	var nodes []string
	if nominated := pod.Status.NominatedNodeName; nominated != "" {
		nodes = append(nodes, nominated)
	}
	for _, node := range w.NodesOfReleasing(release) {
		if !slices.Contains(nodes, node) {
			nodes = append(nodes, node)
		}
	}
	if len(nodes) == 0 {
		return ""
	}
	inUse, err := pl.manager.Claims().ResourceClaimTracker.ListAllAllocatedDevices()
	if err != nil {
		return ""
	}
	ctx, cancel := dryrun.NewBudget(pl.cycleBudget).Context(ctx)
	defer cancel()
	checked := 0
	for _, name := range nodes {
		if checked == maxReleaseChecks || ctx.Err() != nil {
			break
		}
		if rejected := statuses.Get(name); rejected == nil || rejected.Plugin() != Name {
			// Refused for something other than devices (or not at all):
			// a release does not help there.
			continue
		}
		checked++
		nodeInfo, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(name)
		if err != nil || nodeInfo.Node() == nil {
			continue
		}
		if w.FitsOnceReleased(ctx, nodeInfo.Node(), inUse, release) {
			return name
		}
	}
	return ""
}

// withheldSummary names the devices withheld on the nodes Filter refused
// with withheld.Reason, for PostFilter's message; "" when there are none.
// Only the nodes that report withheld devices are looked up.
func (pl *DRAScope) withheldSummary(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) string {
	s, ok := fromCycle[withheldState](state, withheldKey)
	if pl.health == nil || !ok || statuses == nil {
		return ""
	}
	src := pl.withheldSource()
	refusedFor := func(name string) bool {
		status := statuses.Get(name)
		return status != nil && slices.Contains(status.Reasons(), withheld.Reason)
	}
	reporting, anyNode := s.ReportingNodes(ctx, src)
	var nodes []string
	for _, name := range reporting {
		if refusedFor(name) {
			nodes = append(nodes, name)
		}
	}
	if len(nodes) == 0 && anyNode {
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
	return s.Note(ctx, src, pod.Namespace, nodes...)
}
