package drascope

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/devicechoice"
	"github.com/drascope/drascope/pkg/filtermemo"
	"github.com/drascope/drascope/pkg/gangplan"
	"github.com/drascope/drascope/pkg/gangpreempt"
	"github.com/drascope/drascope/pkg/whatif"
	"github.com/drascope/drascope/pkg/withheld"
)

// preFilterCycle is what PreFilter's phases hand each other.
type preFilterCycle struct {
	pod   *v1.Pod
	nodes []fwk.NodeInfo
	// claims are the pod's as the cycle began; gathered is false when
	// DRA is off or the pod has no claims (claims is then empty).
	claims   *podClaims
	gathered bool
	// first is what pruning first gathered and decided, while it stands
	// (prune.go).
	first *prunedFirst
	// plan is a gang member's plan, whose devices upstream's allocator is
	// steered to; dryRun a pod-group preemption's dry run whose victims'
	// devices the member is given; attempt the pod-group cycle's record.
	plan    *gangplan.Placement
	dryRun  *gangpreempt.DryRun
	attempt *gangplan.Attempt
}

// PreFilter runs upstream's PreFilter between drascope's phases, each a
// function below that says what it writes to the cycle state
// (cyclestate.go):
//
//  1. gatherClaims: the pod's claims, and the withheld devices' view;
//     steerByQuota (quota.go): the devices its DeviceQuotas hide.
//  2. pruneFirst (prune.go): for the pods it serves, the nodes that may
//     fit, before upstream's PreFilter; a pod no node can serve is refused
//     here, where upstream's PreFilter and PostFilter provably change
//     nothing.
//  3. runUpstream: upstream's PreFilter, on pruning's view where there is
//     one, steered to a gang member's plan, given a gang preemption's
//     victims' devices, without shared counters for admin access only.
//  4. the admin-access guards (after upstream, whose PostFilter expects
//     the cycle state its PreFilter writes: refusing before it would turn a
//     clear "unschedulable" into a PostFilter error).
//  5. afterPruningFirst or pruneAfterUpstream: the what-if preemption's
//     dry runs read, the filter memo's cycle, and the nodes Filter sees.
//
// All of it runs before anything is reserved.
func (pl *DRAScope) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	c := &preFilterCycle{pod: pod, nodes: nodes}
	pl.gatherClaims(state, c)
	defer pl.steerByQuota(ctx, state, c)()
	if c.gathered {
		if status := pl.pruneFirst(ctx, state, c); status != nil {
			return nil, status
		}
	}
	result, status := pl.runUpstream(ctx, state, c)
	if !status.IsSuccess() || !pl.enabled {
		return result, status
	}
	if status := pl.checkAdminAccess(ctx, pod, c.claims); !status.IsSuccess() {
		return nil, status
	}
	if c.first != nil && result.AllNodes() {
		return pl.afterPruningFirst(state, c), nil
	}
	return pl.pruneAfterUpstream(ctx, state, c, result)
}

// gatherClaims writes the pod's claims (claimsKey) and, when devices are
// withheld, the cycle's view of them (withheldKey). It starts the cycle's
// capture of what upstream's allocator is built from, tells BestFit how
// many devices the pod wants, and remembers a pod that a hold's end may
// free devices for.
func (pl *DRAScope) gatherClaims(state fwk.CycleState, c *preFilterCycle) {
	if pl.manager != nil {
		// What upstream's PreFilter hands its allocator this cycle, and
		// only that, is what node pruning reads.
		pl.manager.BeginCapture()
	}
	c.claims = &podClaims{}
	if pl.enabled && len(c.pod.Spec.ResourceClaims) > 0 {
		c.claims, c.gathered = pl.claimsOf(c.pod), true
		state.Write(claimsKey, c.claims)
	}
	if pl.manager != nil {
		pl.manager.Want(devicechoice.Wanted(c.claims.toAllocate))
	}
	if pl.health != nil {
		state.Write(withheldKey, withheldState{withheld.NewCycle(c.claims.toAllocate, c.gathered && c.claims.unknown == 0)})
	}
	if pl.waiting != nil && (c.gathered || requestsExtendedResources(c.pod)) && pl.manager.Claims().MayBeFreedSilently() {
		// Held devices, or devices in flight that a failed write would
		// hold, may refuse this pod; when the hold ends, no event says so.
		// Remembered before upstream's PreFilter takes the in-use set, so
		// that a hold ending in between still retries the pod.
		pl.waiting.RetryWhenDevicesFree(c.pod)
	}
}

// runUpstream runs upstream's PreFilter (which writes upstream's own cycle
// state, and mixedAdminKey for a pod that mixes admin access with ordinary
// requests), with what the decorated manager hands its allocator set for
// this pod: BestFit's order, a gang member's plan (steering), a pod-group
// preemption's victims' devices (freeing). It records a gang member in the
// pod-group cycle's attempt.
func (pl *DRAScope) runUpstream(ctx context.Context, state fwk.CycleState, c *preFilterCycle) (*fwk.PreFilterResult, *fwk.Status) {
	if pl.manager != nil {
		defer pl.manager.ListForAllocator()()
	}
	stopSteering := pl.steerFor(c)
	stopFreeing := pl.freeVictimsDevices(ctx, c)
	result, status := pl.upstreamPreFilter(ctx, state, c)
	stopFreeing()
	stopSteering()
	if pl.manager != nil && c.pod.Spec.SchedulingGroup != nil {
		c.attempt = gangAttemptOf(state)
		if c.plan != nil {
			c.attempt.MarkSteered()
		}
	}
	return result, status
}

// afterPruningFirst ends PreFilter for a pod pruning first served: it
// writes the what-if (whatIfKey) and the filter memo's cycle (memoKey), and
// returns the nodes pruning kept. The pod is no gang member and not
// nominated (mayPruneFirst): no plan, no dry run, no node to stay on.
func (pl *DRAScope) afterPruningFirst(state fwk.CycleState, c *preFilterCycle) *fwk.PreFilterResult {
	first := c.first
	if w := pl.newWhatIf(first.view, c.claims); w != nil {
		state.Write(whatIfKey, whatIfState{w})
	}
	var candidates sets.Set[string]
	if first.result != nil {
		candidates = first.result.NodeNames
	}
	if memo := pl.newMemoCycle(c.claims, c.nodes, first.view, candidates); memo != nil {
		state.Write(memoKey, memoState{memo})
	}
	return first.result
}

// pruneAfterUpstream ends PreFilter for a pod pruning first did not serve:
// from what upstream's PreFilter built its allocator from, it writes the
// what-if (whatIfKey) and, where every node stays, the filter memo's cycle
// (memoKey); it keeps a preemptor on its nominated node while its victims
// leave, a gang member in a pod-group preemption's dry run on every node,
// a planned member on its planned node, and otherwise prunes the nodes.
func (pl *DRAScope) pruneAfterUpstream(ctx context.Context, state fwk.CycleState, c *preFilterCycle, result *fwk.PreFilterResult) (*fwk.PreFilterResult, *fwk.Status) {
	if !result.AllNodes() || !c.gathered {
		if c.dryRun != nil {
			return pl.preFilterInDryRun(state, c.dryRun, nil, nil, nil)
		}
		return keepToPlan(result, c.plan), nil
	}
	view := pl.takeCycleView(c.pod, c.claims)
	writeShortageState(state, c.claims, view)
	w := pl.newWhatIf(view, c.claims)
	if w != nil {
		c.attempt.Record(c.pod, w.Cycle(), w.Claims())
	}
	if c.dryRun != nil {
		return pl.preFilterInDryRun(state, c.dryRun, w, keptOf(view), keepToPlan(result, c.plan))
	}
	if w != nil {
		state.Write(whatIfKey, whatIfState{w})
		if node := pl.nominatedNodeAwaitingVictims(ctx, c.pod, c.nodes, w); node != "" {
			klog.FromContext(ctx).V(4).Info("Staying on the nominated node while its victims' devices are released", "pod", klog.KObj(c.pod), "node", node)
			return keepToPlan(&fwk.PreFilterResult{NodeNames: sets.New(node)}, c.plan), nil
		}
	}
	result, status := pl.pruneNodes(ctx, c.pod, c.nodes, c.claims, view)
	if status.IsSuccess() && result.AllNodes() && c.plan == nil && c.pod.Spec.SchedulingGroup == nil {
		// Every node is kept for a pod pruning first does not serve
		// (admin access, a nominated pod, one that may preempt holders
		// of lower priority): Filter may remember as for one it serves.
		// Not for gang members, whose cycles steer and plan.
		if memo := pl.newMemoCycle(c.claims, c.nodes, view, nil); memo != nil {
			state.Write(memoKey, memoState{memo})
		}
	}
	if status.IsSuccess() {
		result = keepToPlan(result, c.plan)
	}
	return result, status
}

// checkAdminAccess refuses a pod when a claim it still needs allocated asks
// for admin access that this scheduler must not grant (pkg/adminaccess).
// Claims that are missing are not among them: upstream's PreFilter, which
// ran first, already refused such pods.
func (pl *DRAScope) checkAdminAccess(ctx context.Context, pod *v1.Pod, claims *podClaims) *fwk.Status {
	refusal := pl.adminAccess.Check(claims.toAllocate)
	if refusal == nil {
		return nil
	}
	klog.FromContext(ctx).V(3).Info("Refusing admin access", "pod", klog.KObj(pod), "resourceclaim", klog.KObj(refusal.Claim), "request", refusal.Request, "reason", refusal.Reason)
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, refusal.Message)
}

// preFilterIgnoringCounters runs upstream's PreFilter, over slices without
// counter consumption when the pod asks for admin access only
// (pkg/adminaccess, kubernetes/kubernetes#140729), and notes a mixed pod in
// the cycle state (mixedAdminKey) for Filter's message.
func (pl *DRAScope) preFilterIgnoringCounters(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo, claims *podClaims) (*fwk.PreFilterResult, *fwk.Status) {
	use := adminaccess.None
	if pl.manager != nil {
		use = adminaccess.UseOf(claims.toAllocate, claims.unknown, func() bool { return pl.requestsDRAExtendedResources(pod) })
	}
	switch use {
	case adminaccess.Only:
		klog.FromContext(ctx).V(5).Info("Allocating admin access without shared counters", "pod", klog.KObj(pod), "workaround", adminaccess.UpstreamIssue)
		defer pl.manager.IgnoreCounters()()
	case adminaccess.Mixed:
		state.Write(mixedAdminKey, mixedAdminData{})
	}
	return pl.DynamicResources.PreFilter(ctx, state, pod, nodes)
}

// requestsDRAExtendedResources reports whether a container asks for an
// extended resource that a DeviceClass maps to DRA devices (any extended
// resource, when the mapping is unknown).
func (pl *DRAScope) requestsDRAExtendedResources(pod *v1.Pod) bool {
	var resolver fwk.DeviceClassResolver
	if pl.manager != nil {
		resolver = pl.manager.DeviceClassResolver()
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range containers {
			for _, list := range []v1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name, quantity := range list {
					if quantity.IsZero() || !v1helper.IsExtendedResourceName(name) {
						continue
					}
					if resolver == nil || resolver.GetDeviceClass(name) != nil {
						return true
					}
				}
			}
		}
	}
	return false
}

// steerFor starts, for a gang member with a plan (podgrouppostfilter.go),
// steering upstream's listing to its planned devices, and sets c.plan;
// the returned func stops it.
func (pl *DRAScope) steerFor(c *preFilterCycle) (stop func()) {
	if pl.manager == nil || c.pod.Spec.SchedulingGroup == nil {
		return func() {}
	}
	c.plan = pl.gangPlans.Get(c.pod.UID)
	if c.plan == nil {
		return func() {}
	}
	return pl.manager.Steer(&c.plan.Devices)
}

// keepToPlan narrows PreFilter's answer for a planned member to its
// planned node: none when the answer left that node out.
func keepToPlan(result *fwk.PreFilterResult, plan *gangplan.Placement) *fwk.PreFilterResult {
	if plan == nil {
		return result
	}
	if result.AllNodes() || result.NodeNames.Has(plan.Node) {
		return &fwk.PreFilterResult{NodeNames: sets.New(plan.Node)}
	}
	return &fwk.PreFilterResult{NodeNames: sets.New[string]()}
}

// freeVictimsDevices starts, for a gang member in a pod-group preemption's
// dry run whose devices DRAScope can follow, handing upstream's allocator
// the victims' devices as free (pkg/gangpreempt), and sets c.dryRun; the
// returned func stops it.
func (pl *DRAScope) freeVictimsDevices(ctx context.Context, c *preFilterCycle) (stop func()) {
	p := gangpreempt.From(ctx)
	if p == nil || pl.manager == nil || c.pod.Spec.SchedulingGroup == nil || !pl.mayFollowDevices(c.pod, c.claims) {
		return func() {}
	}
	remaining := func() (sets.Set[types.UID], error) {
		nodes, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return nil, err
		}
		uids := sets.New[types.UID]()
		for _, n := range nodes {
			for _, info := range n.GetPods() {
				uids.Insert(info.GetPod().UID)
			}
		}
		return uids, nil
	}
	if !p.Free(remaining, pl.victimView(), pl.allocating.Features.ConsumableCapacity, pl.manager.SharedDRAManager.ResourceSlices().ListWithDeviceTaintRules) {
		return func() {}
	}
	c.dryRun = p
	klog.FromContext(ctx).V(5).Info("Pod group preemption: victims' devices are free for the member", "pod", klog.KObj(c.pod), "devices", p.Freed.Len(), "released", p.Released.Len())
	return pl.manager.Free(p)
}

// mayFollowDevices reports whether a what-if can follow the devices of the
// pod's claims: takeCycleView's and newWhatIf's conditions, as far as
// they are known before upstream's PreFilter.
func (pl *DRAScope) mayFollowDevices(pod *v1.Pod, claims *podClaims) bool {
	if !pl.enabled || !allToAllocate(pod, claims) || !pl.dryRunAllocates(claims.toAllocate) {
		return false
	}
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil {
			return false
		}
	}
	return true
}

// preFilterInDryRun ends PreFilter for a member given the victims' devices:
// with a what-if (whatIfKey) that follows what its Reserve chooses, and
// every node of result (neither pruned nor kept to a nominated node: both
// read devices as the informers show them). Without a what-if, nothing
// would keep a victim the member needs from being spared, so the member
// fails.
func (pl *DRAScope) preFilterInDryRun(state fwk.CycleState, dryRun *gangpreempt.DryRun, w *whatif.WhatIf, kept sets.Set[structured.DeviceID], result *fwk.PreFilterResult) (*fwk.PreFilterResult, *fwk.Status) {
	if w == nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "pod group preemption: the member's claims changed during the dry run")
	}
	w.InDryRun(dryRun, kept)
	state.Write(whatIfKey, whatIfState{w})
	return result, nil
}

// newWhatIf keeps, for a pod whose claims are all still to allocate and
// ask for no admin access, what this cycle's allocator was built from, for
// preemption's dry runs (pkg/whatif).
func (pl *DRAScope) newWhatIf(view *cycleView, claims *podClaims) *whatif.WhatIf {
	if view == nil || !pl.dryRunAllocates(claims.toAllocate) {
		return nil
	}
	return whatif.New(whatif.Options{
		Allocating: pl.allocating,
		State:      view.seen.State,
		Kept:       view.seen.Kept,
		Withheld:   view.seen.Withheld,
		Slices:     view.slices,
		Claims:     claims.toAllocate,
		Wanted:     devicechoice.Wanted(claims.toAllocate),
		Budget:     pl.cycleBudget,
		View:       pl.victimView(),
	})
}

// dryRunAllocates reports whether a dry run (pkg/dryrun) allocates the
// claims as upstream's Filter would. With DRANodeAllocatableResources
// (alpha), upstream's Filter also checks node-allocatable resources mapped
// to devices, which a dry run does not: no preemption for devices then;
// nor for claims asking for admin access, which hold no device.
func (pl *DRAScope) dryRunAllocates(claims []*resourceapi.ResourceClaim) bool {
	if pl.allocating.Classes == nil || pl.nodeAllocatableResources {
		return false
	}
	for _, claim := range claims {
		if adminaccess.FirstRequest(claim) != "" {
			return false
		}
	}
	return true
}

// keptOf returns the devices a cycle's in-use set holds for no claim.
func keptOf(view *cycleView) sets.Set[structured.DeviceID] {
	if view == nil {
		return nil
	}
	return view.seen.Kept
}

// nominatedNodeAwaitingVictims returns the node a preemptor is nominated
// to while its victims' devices there are on their way out, if it fits
// there once they are free (whatif.AwaitingVictims): the preemptor then
// stays with that node. Tried on every node, it could bind on another node
// whose devices are freed first, by the victims of a preemptor of lower
// priority, leaving its own victims preempted for nothing and the other
// preemptor to preempt again.
func (pl *DRAScope) nominatedNodeAwaitingVictims(ctx context.Context, pod *v1.Pod, nodes []fwk.NodeInfo, w *whatif.WhatIf) string {
	nominated := pod.Status.NominatedNodeName
	if nominated == "" || !mayPreempt(pod) {
		return ""
	}
	for _, n := range nodes {
		if node := n.Node(); node != nil && node.Name == nominated {
			if w.AwaitingVictims(ctx, node, podsOf(n), corev1helpers.PodPriority(pod), time.Now()) {
				return nominated
			}
			return ""
		}
	}
	return ""
}

// podsOf returns the node's pods that use claims.
func podsOf(nodeInfo fwk.NodeInfo) []*v1.Pod {
	var pods []*v1.Pod
	for _, info := range nodeInfo.GetPods() {
		if pod := info.GetPod(); len(pod.Spec.ResourceClaims) > 0 {
			pods = append(pods, pod)
		}
	}
	return pods
}

// newMemoCycle sets the filter memo up for a cycle from view, what
// upstream's PreFilter built its allocator from (where pruning first served
// it, the allocator had the pools reaching the candidates, in BestFit's
// order: for each node the view holds the same slices), or returns nil
// when the memo cannot answer for it. candidates are the nodes Filter will
// see, nil for every node.
func (pl *DRAScope) newMemoCycle(claims *podClaims, nodes []fwk.NodeInfo, view *cycleView, candidates sets.Set[string]) *filtermemo.Cycle {
	if pl.filterMemo == nil || pl.features.EnableDRANodeAllocatableResources || view == nil {
		return nil
	}
	current := func() map[string]*v1.Node {
		byName := make(map[string]*v1.Node, len(nodes))
		for _, info := range nodes {
			if node := info.Node(); node != nil {
				byName[node.Name] = node
			}
		}
		return byName
	}
	layout := func() *filtermemo.Layout { return pl.layoutOf(view) }
	return pl.filterMemo.NewCycle(claims.toAllocate, pl.deviceClass, layout, current, view.seen.State, candidates)
}

// layoutOf returns the filter memo's layout of the view's slices, laid out
// once a cycle: finding the last cycle's layout looks up every listed
// slice.
func (pl *DRAScope) layoutOf(view *cycleView) *filtermemo.Layout {
	if view.layout == nil {
		view.layout = pl.filterMemo.LayoutOf(view.slices, pl.countersReachEveryNode)
	}
	return view.layout
}
