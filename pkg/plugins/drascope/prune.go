package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/dramanager"
	"github.com/drascope/drascope/pkg/filtermemo"
	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/nodeprune"
)

// Node pruning, PreFilter's (pkg/nodeprune holds the index and the pass
// over the slices; this file the seam).

// noFreeDevice is the refusal when no node reaches a free device for every
// request. It starts as upstream's Filter refusal does.
const noFreeDevice = "cannot allocate all claims: no node can reach a free device for every request"

// pruneNodes narrows the nodes Filter runs on to those that could satisfy
// the pod's claims (pkg/nodeprune), from exactly the in-use set and slices
// upstream's PreFilter built this cycle's allocator from, which the
// decorator saw go by. Nodes left out get UnschedulableAndUnresolvable
// from the framework without Filter running; so that pruning switches off
// nothing Filter or preemption does for them, it keeps nodes whose only
// free devices are withheld (Filter explains them and retries the pod when
// they recover) and, for a pod that may preempt, nodes where pods of lower
// priority hold claims (DRA-aware preemption must reach them). It returns
// nil (every node) when it does not prune: without a cycle view
// (takeCycleView), and for pods asking for admin access.
func (pl *DRAScope) pruneNodes(ctx context.Context, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims, view *cycleView) (*fwk.PreFilterResult, *fwk.Status) {
	if view == nil {
		return nil, nil
	}
	var byName []*v1.Node
	list := func() []*v1.Node {
		if byName == nil {
			byName = make([]*v1.Node, 0, len(nodes))
			for _, n := range nodes {
				if node := n.Node(); node != nil {
					byName = append(byName, node)
				}
			}
		}
		return byName
	}
	tracker := pl.manager.Claims().ResourceClaimTracker
	pruning := nodeprune.View{
		Slices: view.slices, InUse: view.seen.State.AllocatedDevices, Withheld: view.seen.Withheld, Kept: view.seen.Kept,
		InFlight: func(uid types.UID) bool { return tracker.GetPendingAllocation(uid) != nil },
		IDs:      &pl.deviceIDs,
	}
	// The framework's node list holds only nodes with a Node object, and
	// the snapshot's lookup finds exactly those.
	has := func(name string) bool {
		_, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(name)
		return err == nil
	}
	var candidates sets.Set[string]
	var all bool
	if pl.index != nil {
		candidates, all = pl.index.Candidates(claims.toAllocate, pl.deviceClass, pruning, nodeprune.Nodes{Count: len(nodes), Has: has, List: list})
	} else {
		candidates, all = nodeprune.Candidates(claims.toAllocate, pl.deviceClass, pruning, list())
	}
	if all {
		return nil, nil
	}
	if mayPreempt(pod) {
		if !pl.holders.Known() {
			// Which nodes pods of lower priority hold devices on is
			// not known yet: prune nothing rather than hide them.
			return nil, nil
		}
		pl.holders.KeepPreemptible(candidates, pod, has)
	}
	if candidates.Len() == len(nodes) {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	if candidates.Len() == 0 {
		logger.V(5).Info("No node reaches a free device for every request", "pod", klog.KObj(pod), "nodes", len(nodes))
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, noFreeDevice)
	}
	logger.V(5).Info("Nodes that reach a free device for every request", "pod", klog.KObj(pod), "candidates", candidates.Len(), "nodes", len(nodes))
	return &fwk.PreFilterResult{NodeNames: candidates}, nil
}

// deviceClass is the DeviceClass of that name, as upstream's allocator
// reads it.
func (pl *DRAScope) deviceClass(name string) (*resourceapi.DeviceClass, error) {
	return pl.manager.DeviceClasses().Get(name)
}

// cycleView is what upstream's PreFilter built this cycle's allocator from,
// which the decorator saw go by.
type cycleView struct {
	seen   *dramanager.InUse
	slices []*resourceapi.ResourceSlice
	// layout is the filter memo's layout of slices, once laid out this
	// cycle (layoutOf): the served pools and the memo read the same one.
	layout *filtermemo.Layout
}

// takeCycleView returns what upstream's allocator was built from, for the
// pod's claims as DRAScope gathered them, or nil when there is nothing
// node pruning and preemption's dry runs can work with: claims already
// allocated, not yet readable, being allocated for another pod of their
// group, or changed while upstream's PreFilter ran, and pods with extended
// resources, which DRA or a device plugin may serve.
func (pl *DRAScope) takeCycleView(pod *v1.Pod, claims *podClaims) *cycleView {
	if pl.manager == nil {
		return nil
	}
	seen, slices, ok := pl.manager.TakeCapture()
	if !ok {
		// Upstream built no allocator this cycle.
		return nil
	}
	if !allToAllocate(pod, claims) || !pl.claimsUnchanged(claims) {
		return nil
	}
	return &cycleView{seen: seen, slices: slices}
}

// writeShortageState keeps, for PostFilter's message, what the cycle's
// allocator was built from (shortageKey).
func writeShortageState(state fwk.CycleState, claims *podClaims, view *cycleView) {
	if view == nil {
		return
	}
	state.Write(shortageKey, &shortageState{claims: claims.toAllocate, view: nodeprune.View{
		Slices: view.slices, InUse: view.seen.State.AllocatedDevices, Withheld: view.seen.Withheld,
	}})
}

// prunedFirst is what pruneFirst gathered and decided.
type prunedFirst struct {
	// view is the whole cycle view, which preemption's dry runs read.
	view *cycleView
	// result are the nodes pruning kept (nil: every node).
	result *fwk.PreFilterResult
	// served is what upstream's PreFilter is handed.
	served *dramanager.Served
}

// pruneFirst prunes the nodes before upstream's PreFilter runs, on what
// that PreFilter would build its allocator from: it gathers the in-use set
// and the slice listing through the same decorated calls upstream makes
// (so held and withheld devices are in the in-use set, and the cycle's
// capture has them), and runs pruneNodes on that view. Then:
//
//   - If no node is left, the pod is refused with pruneNodes' status,
//     without upstream's PreFilter (on a full cluster, most attempts), and
//     refusedEarlyKey says so to PostFilter.
//   - Otherwise c.first holds the view for upstream's PreFilter
//     (upstreamPreFilter): the in-use set gathered here, not a second copy
//     of the tracker's, and, when pruning left some nodes out, only the
//     slices of the pools that reach a candidate, so that its allocator is
//     set up over the candidates instead of every node. Filter runs on the
//     candidates only, where that allocator answers as one over every
//     slice.
//
// For a pod it does not serve (mayPruneFirst), or when the view cannot be
// had, it leaves c.first nil: upstream's PreFilter then runs as always,
// and pruning after it.
//
// Skipping upstream's PreFilter is the same as running it only where
// upstream would have built an allocator and returned success
// (mayPruneFirst), and where nothing after it acts for the pod: the
// framework runs no Filter, Score, Reserve or PreBind after a PreFilter
// refusal; upstream's PostFilter acts only on claims already allocated or
// found unavailable by its Filter, and there are none (DRAScope's
// PostFilter answers for it: refusedEarly); preemption considers only
// nodes refused as Unschedulable, and a PreFilter refusal makes every
// node UnschedulableAndUnresolvable, as pruning to no node does. The
// pod's retry is unchanged: it is refused by this plugin at PreFilter
// either way, so the same queueing hints requeue it.
func (pl *DRAScope) pruneFirst(ctx context.Context, state fwk.CycleState, c *preFilterCycle) *fwk.Status {
	if !pl.mayPruneFirst(c.pod, c.claims) {
		return nil
	}
	var err error
	if pl.features.EnableDRAConsumableCapacity {
		_, err = pl.manager.Claims().GatherAllocatedState()
	} else {
		_, err = pl.manager.Claims().ListAllAllocatedDevices()
	}
	if err == nil {
		_, err = pl.manager.ResourceSlices().ListWithDeviceTaintRules()
	}
	if err != nil {
		// A concurrent modification, which upstream retries: let it.
		pl.manager.BeginCapture()
		return nil
	}
	view := pl.takeCycleView(c.pod, c.claims)
	if view == nil {
		// A claim changed since DRAScope read it.
		return nil
	}
	writeShortageState(state, c.claims, view)
	result, status := pl.pruneNodes(ctx, c.pod, c.nodes, c.claims, view)
	if !status.IsSuccess() {
		metrics.ObserveEarlyRefusal(metrics.EarlyRefusalRefused)
		klog.FromContext(ctx).V(5).Info("Refused before upstream's PreFilter: no node reaches a free device for every request", "pod", klog.KObj(c.pod))
		state.Write(refusedEarlyKey, refusedEarlyData{})
		return status
	}
	metrics.ObserveEarlyRefusal(metrics.EarlyRefusalPassed)
	served := &dramanager.Served{InUse: view.seen, Slices: view.slices}
	if !result.AllNodes() {
		served.Slices = pl.poolsReaching(view, result.NodeNames)
	}
	c.first = &prunedFirst{view: view, result: result, served: served}
	return nil
}

// poolsReaching returns the slices of the pools that reach a candidate
// (nodeprune.PoolsReaching). With the filter memo, it reads them from the
// memo's layout of the listing, which is kept from cycle to cycle: the
// pools that may reach any node and the candidates' own, without a pass
// over every slice and its pool's name each cycle. The layout counts a pool
// whose slices name different nodes among those that may reach any node,
// so such a pool is served whichever nodes are candidates: more than
// PoolsReaching serves, which the allocator reads only for the nodes those
// slices name. The order differs from the listing's, which is a map's:
// upstream's allocators read a pool's slices in name order (incubating) or
// in the order given, and the layout holds each bucket's by name.
func (pl *DRAScope) poolsReaching(view *cycleView, candidates sets.Set[string]) []*resourceapi.ResourceSlice {
	if pl.filterMemo == nil {
		return nodeprune.PoolsReaching(view.slices, candidates, pl.countersReachEveryNode)
	}
	return pl.layoutOf(view).Reaching(candidates)
}

// upstreamPreFilter runs upstream's PreFilter, on the view pruning first
// gathered when there is one (servedPreFilter). Upstream reads the pod's
// claims again: if one changed since that view was taken (another
// scheduler allocated it, or another pod of its group is allocating it),
// upstream may have worked with the changed claim and the pruned slices,
// so it runs again on its own calls, and the view is dropped (pruning then
// runs after it, and finds the claims changed, as it always has).
func (pl *DRAScope) upstreamPreFilter(ctx context.Context, state fwk.CycleState, c *preFilterCycle) (*fwk.PreFilterResult, *fwk.Status) {
	if c.first == nil {
		return pl.preFilterIgnoringCounters(ctx, state, c.pod, c.nodes, c.claims)
	}
	result, status := pl.servedPreFilter(ctx, state, c.pod, c.nodes, c.claims, c.first.served)
	if !status.IsSuccess() || pl.claimsUnchanged(c.claims) {
		return result, status
	}
	klog.FromContext(ctx).V(5).Info("A claim changed while pruning first: upstream's PreFilter runs again on its own view", "pod", klog.KObj(c.pod))
	c.first = nil
	pl.manager.BeginCapture()
	return pl.preFilterIgnoringCounters(ctx, state, c.pod, c.nodes, c.claims)
}

// servedPreFilter runs upstream's PreFilter while the decorated manager
// serves it served. Upstream's other listings of slices (node-allocatable
// resources in Filter, after this returns) and every call outside this
// cycle's PreFilter get fresh answers.
func (pl *DRAScope) servedPreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims, served *dramanager.Served) (*fwk.PreFilterResult, *fwk.Status) {
	defer pl.manager.Serve(served)()
	return pl.preFilterIgnoringCounters(ctx, state, pod, nodes, claims)
}

// mayPruneFirst reports whether upstream's PreFilter, for this pod now,
// would build an allocator and succeed, so that only the allocator's
// answer can refuse the pod, and the allocator is built from the in-use
// set and slices alone: each of its other returns in v1.37.2
// (dynamicresources.go, PreFilter and foreachPodResourceClaim) is ruled out
// here. It also leaves out what DRAScope's own PreFilter does besides
// pruning: gang members (plans, steering, dry runs, pod-group state),
// nominated pods (which may stay on their node while victims leave) and
// pods that may preempt pods holding claims at a lower priority (pruning
// keeps their nodes, and preemption's dry runs on them are not narrowed).
func (pl *DRAScope) mayPruneFirst(pod *v1.Pod, claims *podClaims) bool {
	if pl.index == nil || pl.manager == nil || !allToAllocate(pod, claims) ||
		pod.Spec.SchedulingGroup != nil || pod.Status.NominatedNodeName != "" {
		return false
	}
	if pl.features.EnableInPlacePodVerticalScalingSchedulerPreemption && resource.IsPodResizeDeferred(pod) {
		// Upstream skips the pod.
		return false
	}
	if mayPreempt(pod) && pl.holders.AnyBelow(corev1helpers.PodPriority(pod)) {
		return false
	}
	// Upstream reads the pod's claims again: each must exist (allToAllocate),
	// not be being deleted, and be the pod's own when made from a template.
	if claims.refused > 0 {
		return false
	}
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil || adminaccess.FirstRequest(claim) != "" {
			return false
		}
		if !pl.classesExist(claim) {
			return false
		}
	}
	return true
}

// classesExist reports whether every class the claim's requests name
// exists (upstream refuses one that does not, by name), and its requests
// are of a kind upstream allocates with the scheduler's features.
func (pl *DRAScope) classesExist(claim *resourceapi.ResourceClaim) bool {
	exists := func(class string) bool {
		if class == "" {
			return false
		}
		_, err := pl.deviceClass(class)
		return err == nil
	}
	for _, request := range claim.Spec.Devices.Requests {
		switch {
		case request.Exactly != nil:
			if !exists(request.Exactly.DeviceClassName) {
				return false
			}
		case len(request.FirstAvailable) > 0:
			if !pl.features.EnableDRAPrioritizedList {
				return false
			}
			for _, sub := range request.FirstAvailable {
				if !exists(sub.DeviceClassName) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}
