package drascope

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/dryrun"
)

// DRA-aware preemption (docs/preemption.md). Upstream's DynamicResources
// cannot take part in DefaultPreemption: it refuses a device shortage as
// UnschedulableAndUnresolvable, which preemption never looks past; it has no
// PreFilterExtensions, so removing a victim changes nothing it knows; and
// its allocator, built once in PreFilter over a fixed in-use set, lives in
// cycle state whose Clone returns the same pointer. DRAScope changes all
// three. For a pod whose claims are all still to allocate, PreFilter keeps
// what upstream's allocator was built from (a whatIf in the cycle state,
// cloned independently); RemovePod and AddPod record the pods a dry run
// removes (victims) and adds (nominated pods, reprieved victims); Filter,
// when that changed anything, answers with its own allocation over the
// node's devices, victims' freed and nominated pods' taken (pkg/dryrun).
// DefaultPreemption itself (victim choice, PDBs, preemptionPolicy, the
// events) runs unchanged.

const whatIfStateKey fwk.StateKey = Name + "/whatif"

// whatIf is the device side of a cycle's what-ifs: what upstream's
// allocator was built from, and the pods a dry run removed from or added
// to the node being evaluated.
type whatIf struct {
	// cycle and claims are shared by every clone: they are only read.
	cycle  *dryrun.Cycle
	claims []*resourceapi.ResourceClaim
	// removed and added are each clone's own: preemption evaluates nodes
	// in parallel, each on a clone.
	removed map[types.UID]*v1.Pod
	added   []*v1.Pod
	// preempting is set on a clone once a dry run removed a victim, and
	// stays set while victims are reprieved (added back) one by one.
	preempting bool
	// releasing is shared by every clone: read once, when a dry run
	// first needs it.
	releasing *releasing
	// preemptionBudget and nominatedBudget, shared by every clone, bound
	// the cycle's what-ifs together: preemption's dry runs (it tries many
	// nodes, each on a clone), and Filter's pass with the pods nominated
	// to each node. Each starts with its first run, so that one does not
	// spend the other's.
	preemptionBudget, nominatedBudget *dryrun.Budget
	// In a pod-group preemption's dry run (gangpreemption.go): dryRun is
	// the run, chosen (shared by every clone) the devices the member's
	// Reserve put in flight, reinstated (each clone's own) the victims
	// the run put back.
	dryRun     *podGroupPreemption
	chosen     sets.Set[structured.DeviceID]
	reinstated sets.Set[types.UID]
	// kept are the devices in use for no claim (held, withheld), which
	// the member's allocator never gets.
	kept sets.Set[structured.DeviceID]
	// withheld are the cycle's devices withheld as Unhealthy, shared by
	// every clone.
	withheld sets.Set[structured.DeviceID]
	// guarded: the claims ask for enough devices that Filter checks a
	// node's free devices before upstream's search (searchguard.go).
	guarded bool
}

// releasing is a cycle's releaseView, read once.
type releasing struct {
	once sync.Once
	view releaseView
}

// releaseView is what the claims, as the tracker shows them now, say of
// devices on their way out.
type releaseView struct {
	// allocations are those of claims whose consumers are all gone: the
	// resourceclaim controller is about to deallocate them.
	allocations []*resourceapi.AllocationResult
	// held are the devices the claims hold, allocated or in flight; nil
	// when the claims could not be listed. The in-use set a cycle starts
	// from is upstream's allocated-devices tracker, which its own informer
	// handler updates, apart from the assume cache that lists the claims:
	// for a moment after a claim is deallocated or deleted, the in-use set
	// can still count devices no claim holds, while the claim no longer
	// shows them as releasing. Counted in use, they made a nominated
	// preemptor whose last victim's claim had just been deallocated look
	// short of devices: DefaultPreemption then found no candidate, cleared
	// its nomination, and a pod of lower priority took its devices (soak
	// seed 231 at six cases at once). Those devices are free.
	held sets.Set[structured.DeviceID]
}

// freeOn marks the view's devices on their way out as free on a node's
// share, and reports whether any of them were in use there.
func (v releaseView) freeOn(n *dryrun.Node) bool {
	freed := false
	for _, allocation := range v.allocations {
		freed = n.Free(allocation) || freed
	}
	if v.held != nil {
		freed = n.FreeAllBut(v.held) || freed
	}
	return freed
}

// releaseView returns the cycle's release view.
func (pl *DRAScope) releaseView(w *whatIf) releaseView {
	if w.releasing == nil {
		return releaseView{}
	}
	w.releasing.once.Do(func() { w.releasing.view = pl.readReleaseView() })
	return w.releasing.view
}

func (w *whatIf) Clone() fwk.StateData {
	clone := *w
	clone.removed = maps.Clone(w.removed)
	clone.added = slices.Clone(w.added)
	clone.reinstated = w.reinstated.Clone()
	return &clone
}

func (w *whatIf) changed() bool { return len(w.removed) > 0 || len(w.added) > 0 || w.preempting }

func whatIfIn(state fwk.CycleState) *whatIf {
	w, _ := fromCycle[*whatIf](state, whatIfStateKey)
	return w
}

// newWhatIf keeps, for a pod whose claims are all still to allocate and
// ask for no admin access, what this cycle's allocator was built from.
func (pl *DRAScope) newWhatIf(view *cycleView, claims *podClaims) *whatIf {
	if view == nil || !pl.dryRunAllocates(claims.toAllocate) {
		return nil
	}
	state := view.seen.state
	if state.AllocatedSharedDeviceIDs == nil {
		state.AllocatedSharedDeviceIDs = sets.New[structured.SharedDeviceID]()
	}
	if state.AggregatedCapacity == nil {
		state.AggregatedCapacity = structured.NewConsumedCapacityCollection()
	}
	return &whatIf{
		cycle:            dryrun.NewCycle(pl.allocating, state, view.seen.kept, view.slices),
		claims:           claims.toAllocate,
		removed:          map[types.UID]*v1.Pod{},
		releasing:        &releasing{},
		preemptionBudget: dryrun.NewBudget(pl.cycleBudget),
		nominatedBudget:  dryrun.NewBudget(pl.cycleBudget),
		withheld:         view.seen.withheld,
		guarded:          wantedDevices(claims) >= guardedFrom,
	}
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
		if firstAdminAccessRequest(claim) != "" {
			return false
		}
	}
	return true
}

// PreFilterExtensions makes DRAScope part of preemption's dry runs and of
// the pass of Filter that counts nominated pods.
func (pl *DRAScope) PreFilterExtensions() fwk.PreFilterExtensions {
	if pl.manager == nil {
		return nil
	}
	return pl
}

// RemovePod records a pod a dry run removes from the node: a victim.
func (pl *DRAScope) RemovePod(_ context.Context, state fwk.CycleState, _ *v1.Pod, podInfoToRemove fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	w := whatIfIn(state)
	pod := podInfoToRemove.GetPod()
	if w == nil || len(pod.Spec.ResourceClaims) == 0 || w.unreinstate(pod) {
		return nil
	}
	if i := slices.IndexFunc(w.added, func(p *v1.Pod) bool { return p.UID == pod.UID }); i >= 0 {
		w.added = slices.Delete(w.added, i, i+1)
		return nil
	}
	w.removed[pod.UID] = pod
	w.preempting = true
	return nil
}

// AddPod undoes RemovePod for a reprieved victim, and records any other
// pod as one whose devices come first: a pod nominated to the node, of
// priority at least the pod's.
func (pl *DRAScope) AddPod(_ context.Context, state fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	w := whatIfIn(state)
	pod := podInfoToAdd.GetPod()
	if w == nil || len(pod.Spec.ResourceClaims) == 0 || w.reinstate(pod) {
		return nil
	}
	if _, ok := w.removed[pod.UID]; ok {
		delete(w.removed, pod.UID)
		return nil
	}
	w.added = append(w.added, pod)
	return nil
}

// Filter answers a what-if itself; otherwise it runs upstream's Filter with
// drascope's explanations (withheld.go), and reports a device shortage
// that preempting pods of lower priority on the node could end as
// Unschedulable rather than UnschedulableAndUnresolvable, so that
// DefaultPreemption considers the node, and does not preempt again
// elsewhere while its victims on the node terminate.
func (pl *DRAScope) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	w := whatIfIn(state)
	if status := w.reinstatedConflict(); status != nil {
		return status
	}
	if w != nil && w.changed() {
		return pl.filterWhatIf(ctx, state, w, pod, nodeInfo)
	}
	var status *fwk.Status
	switch memo := memoCycleIn(state); {
	case w.tooFewDevices(nodeInfo):
		status = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, cannotAllocate)
	case memo != nil:
		status = pl.filterMemoized(ctx, state, memo, pod, nodeInfo)
	default:
		status = pl.filterExplained(ctx, state, pod, nodeInfo)
	}
	if w != nil && status.Code() == fwk.UnschedulableAndUnresolvable && mayPreempt(pod) && pl.lowerPriorityPodsHoldDevices(pod, nodeInfo, nil) {
		return fwk.NewStatus(fwk.Unschedulable, status.Reasons()...)
	}
	return status
}

// filterWhatIf checks whether the pod's claims fit on the node with the
// devices of the removed pods' claims free and those of the added pods'
// claims taken.
func (pl *DRAScope) filterWhatIf(ctx context.Context, state fwk.CycleState, w *whatIf, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	budget := w.nominatedBudget
	if w.preempting {
		budget = w.preemptionBudget
	}
	ctx, cancel := budget.Context(ctx)
	defer cancel()
	n := w.cycle.Node(node)
	for _, allocation := range pl.allocationsFreedBy(w.removed, w.removed, podsOn(nodeInfo, w.added)) {
		n.Free(allocation)
	}
	if w.preempting {
		// A preemption dry run: devices whose pods are gone are as good
		// as free. Counted in use, they would make preemption choose
		// victims for devices already on their way to the preemptor
		// (or to a pod nominated before it).
		pl.releaseView(w).freeOn(n)
	}
	var nominated []*v1.Pod
	var keptClasses sets.Set[string]
	for _, other := range w.added {
		switch pl.take(ctx, n, other, w.claims) {
		case tookDevices:
			nominated = append(nominated, other)
		case shortOfDevices:
			// Its victims' devices are not all free yet. Until they
			// are, it keeps every device of the classes it asks for,
			// as the framework keeps a nominated pod's CPU whether or
			// not it fits yet.
			nominated = append(nominated, other)
			keptClasses = keptClasses.Union(pl.classesOf(other))
		}
	}
	var results []resourceapi.AllocationResult
	var err error
	if !deviceClassesOf(w.claims).HasAny(keptClasses.UnsortedList()...) {
		results, err = n.Allocate(ctx, w.claims)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// One reason for every node, so that the pod's message counts
		// them; not an error, which preemption would list node by node.
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "timed out trying to allocate devices")
	case err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode):
		return fwk.AsStatus(err)
	case results != nil:
		return nil
	}
	reasons := []string{"cannot allocate all claims"}
	if len(w.removed) > 0 {
		reasons[0] += " even with the devices of the lower-priority pods on the node freed"
		if n.ReachesNetworkPools() {
			// Preemption evicts pods of the candidate node only.
			reasons = append(reasons, "devices of network-attached pools that pods on other nodes hold are out of preemption's reach")
		}
	}
	if len(nominated) > 0 {
		reasons = append(reasons, "devices are kept for pods nominated to the node: "+podsSeenFrom(pod.Namespace, nominated))
	}
	if pl.health != nil {
		// As filterExplained: say so, retry on recovery.
		if reason := pl.withheldReasonFor(ctx, pl.withheldIn(state), node); reason != "" {
			pl.waiting.RetryWhenDevicesFree(pod)
			reasons = append(reasons, reason)
		}
	}
	code := fwk.UnschedulableAndUnresolvable
	if mayPreempt(pod) && pl.lowerPriorityPodsHoldDevices(pod, nodeInfo, w.removed) {
		code = fwk.Unschedulable
	}
	return fwk.NewStatus(code, reasons...)
}

// podsSeenFrom names pods for a reader in namespace (a pending pod's
// status and events): those of that namespace by name, the others only by
// their number, so that one tenant learns nothing of another's pods.
func podsSeenFrom(namespace string, pods []*v1.Pod) string {
	var names []string
	others := 0
	for _, pod := range pods {
		if pod.Namespace == namespace {
			names = append(names, klog.KObj(pod).String())
		} else {
			others++
		}
	}
	switch others {
	case 0:
	case 1:
		names = append(names, "a pod of another namespace")
	default:
		names = append(names, fmt.Sprintf("%d pods of other namespaces", others))
	}
	return strings.Join(names, ", ")
}

// taken is what take did with a nominated pod's claims.
type taken int

const (
	// nothingToTake: its claims are allocated already, or not known yet.
	nothingToTake taken = iota
	// tookDevices: its claims fit, and their devices are marked in use.
	tookDevices
	// shortOfDevices: its claims do not fit on the devices free now.
	shortOfDevices
)

// take allocates, on the node's share, the claims of a nominated pod that
// are still to allocate (other than the scheduled pod's own), and marks
// their devices in use.
func (pl *DRAScope) take(ctx context.Context, n *dryrun.Node, pod *v1.Pod, own []*resourceapi.ResourceClaim) taken {
	toAllocate := pl.claimsToAllocate(pod, own)
	if len(toAllocate) == 0 {
		return nothingToTake
	}
	results, err := n.Allocate(ctx, toAllocate)
	switch {
	case err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode):
		// A CEL or class problem, or the time is up: nothing can be
		// said of its devices.
		return nothingToTake
	case results == nil:
		return shortOfDevices
	}
	for i := range results {
		n.Take(&results[i])
	}
	return tookDevices
}

// claimsToAllocate returns the pod's claims the scheduler knows that are
// still to allocate, other than those in own.
func (pl *DRAScope) claimsToAllocate(pod *v1.Pod, own []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	var toAllocate []*resourceapi.ResourceClaim
	pl.forEachClaim(pod, func(claim *resourceapi.ResourceClaim) {
		if claim.Status.Allocation != nil || pl.claims.GetPendingAllocation(claim.UID) != nil {
			return // its devices are in use already
		}
		if slices.ContainsFunc(own, func(c *resourceapi.ResourceClaim) bool { return c.UID == claim.UID }) ||
			slices.ContainsFunc(toAllocate, func(c *resourceapi.ResourceClaim) bool { return c.UID == claim.UID }) {
			return
		}
		toAllocate = append(toAllocate, claim)
	})
	return toAllocate
}

// classesOf returns the device classes of the pod's claims still to
// allocate.
func (pl *DRAScope) classesOf(pod *v1.Pod) sets.Set[string] {
	return deviceClassesOf(pl.claimsToAllocate(pod, nil))
}

// deviceClassesOf returns the device classes the claims' requests and
// their subrequests name.
func deviceClassesOf(claims []*resourceapi.ResourceClaim) sets.Set[string] {
	classes := sets.New[string]()
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil {
				classes.Insert(request.Exactly.DeviceClassName)
			}
			for _, sub := range request.FirstAvailable {
				classes.Insert(sub.DeviceClassName)
			}
		}
	}
	return classes
}

// forEachClaim calls f with each of the pod's claims the scheduler knows.
func (pl *DRAScope) forEachClaim(pod *v1.Pod, f func(*resourceapi.ResourceClaim)) {
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		if claim, err := pl.claims.Get(pod.Namespace, *name); err == nil {
			f(claim)
		}
	}
}

// allocationsFreedBy returns the allocations of the claims of pods that
// would be free if the pods in gone were: those that no other pod
// reserves, and that no pod in stay uses (one assumed on the node, whose
// reservation is not written yet, or one nominated to it). A claim
// reserved for no pod yet is freed only with the pod it was generated for.
func (pl *DRAScope) allocationsFreedBy(pods, gone map[types.UID]*v1.Pod, stay []*v1.Pod) []*resourceapi.AllocationResult {
	used := sets.New[types.UID]()
	for _, other := range stay {
		if _, ok := gone[other.UID]; !ok {
			pl.forEachClaim(other, func(claim *resourceapi.ResourceClaim) { used.Insert(claim.UID) })
		}
	}
	var freed []*resourceapi.AllocationResult
	for _, pod := range pods {
		pl.forEachClaim(pod, func(claim *resourceapi.ResourceClaim) {
			if used.Has(claim.UID) {
				return
			}
			used.Insert(claim.UID)
			allocation := claim.Status.Allocation
			if allocation == nil {
				allocation = pl.claims.GetPendingAllocation(claim.UID)
			}
			if allocation != nil && onlyUsedBy(claim, gone) {
				freed = append(freed, allocation)
			}
		})
	}
	return freed
}

// podsOn returns the pods of the node that use claims, and those added.
func podsOn(nodeInfo fwk.NodeInfo, added []*v1.Pod) []*v1.Pod {
	pods := slices.Clone(added)
	for _, info := range nodeInfo.GetPods() {
		if pod := info.GetPod(); len(pod.Spec.ResourceClaims) > 0 {
			pods = append(pods, pod)
		}
	}
	return pods
}

// onlyUsedBy reports whether every consumer of the claim is one of pods.
func onlyUsedBy(claim *resourceapi.ResourceClaim, pods map[types.UID]*v1.Pod) bool {
	if len(claim.Status.ReservedFor) == 0 {
		owner := metav1.GetControllerOf(claim)
		_, ok := pods[ptr.Deref(owner, metav1.OwnerReference{}).UID]
		return owner != nil && owner.Kind == "Pod" && ok
	}
	for _, consumer := range claim.Status.ReservedFor {
		if _, ok := pods[consumer.UID]; consumer.APIGroup != "" || consumer.Resource != "pods" || !ok {
			return false
		}
	}
	return true
}

// lowerPriorityPodsHoldDevices reports whether pods of lower priority than
// pod on the node, other than those removed already, hold devices that
// preempting them would free.
func (pl *DRAScope) lowerPriorityPodsHoldDevices(pod *v1.Pod, nodeInfo fwk.NodeInfo, removed map[types.UID]*v1.Pod) bool {
	priority := corev1helpers.PodPriority(pod)
	lower := map[types.UID]*v1.Pod{}
	for _, info := range nodeInfo.GetPods() {
		other := info.GetPod()
		if _, ok := removed[other.UID]; !ok && len(other.Spec.ResourceClaims) > 0 && corev1helpers.PodPriority(other) < priority {
			lower[other.UID] = other
		}
	}
	if len(lower) == 0 {
		return false
	}
	gone := maps.Clone(lower)
	maps.Copy(gone, removed)
	return slices.ContainsFunc(pl.allocationsFreedBy(lower, gone, podsOn(nodeInfo, nil)), allocated.HoldsAny)
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
	if pod.Status.NominatedNodeName != gone.Spec.NodeName && !(preempted(gone) && corev1helpers.PodPriority(gone) < corev1helpers.PodPriority(pod)) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("A pod holding claims left a node the pod may be waiting for", "pod", klog.KObj(pod), "deleted", klog.KObj(gone), "node", gone.Spec.NodeName)
	return fwk.Queue, nil
}

// nominatedNodeAwaitingVictims returns the node a preemptor is nominated
// to while its victims' devices there are on their way out, if it fits
// there once they are free: the preemptor then stays with that node.
// Tried on every node, it could bind on another node whose devices are
// freed first, by the victims of a preemptor of lower priority, leaving
// its own victims preempted for nothing and the other preemptor to
// preempt again. Victims are pods of lower priority holding claims that
// the scheduler marked preempted, for their grace period and
// victimGraceSlack after (a victim stuck terminating does not hold the
// preemptor for ever), and the pods gone whose claims are still
// allocated.
func (pl *DRAScope) nominatedNodeAwaitingVictims(ctx context.Context, pod *v1.Pod, nodes []fwk.NodeInfo, w *whatIf) string {
	nominated := pod.Status.NominatedNodeName
	if nominated == "" || !mayPreempt(pod) {
		return ""
	}
	i := slices.IndexFunc(nodes, func(n fwk.NodeInfo) bool { return n.Node() != nil && n.Node().Name == nominated })
	if i < 0 {
		return ""
	}
	nodeInfo := nodes[i]
	priority := corev1helpers.PodPriority(pod)
	leaving := map[types.UID]*v1.Pod{}
	for _, info := range nodeInfo.GetPods() {
		if other := info.GetPod(); len(other.Spec.ResourceClaims) > 0 && corev1helpers.PodPriority(other) < priority && recentlyPreempted(other, time.Now()) {
			leaving[other.UID] = other
		}
	}
	n := w.cycle.Node(nodeInfo.Node())
	for _, allocation := range pl.allocationsFreedBy(leaving, leaving, podsOn(nodeInfo, nil)) {
		n.Free(allocation)
	}
	// Devices leave the node while its victims' claims are on their way
	// to deallocation, and a moment after (releaseView.held): freeOn says
	// whether it freed any in the node's share (its own pools and the
	// network-attached ones it reaches), and a releasing claim of the
	// node's pools counts even when the cycle has its devices free already.
	view := pl.releaseView(w)
	releasing := view.freeOn(n)
	for _, allocation := range view.allocations {
		for _, result := range allocation.Devices.Results {
			if w.cycle.NodeOf(result.Driver, result.Pool) == nominated {
				releasing = true
			}
		}
	}
	if len(leaving) == 0 && !releasing {
		return ""
	}
	if results, err := n.Allocate(ctx, w.claims); err != nil || results == nil {
		// Its nomination is stale (a pod of higher priority took the
		// devices): every node is offered again.
		return ""
	}
	return nominated
}

// victimGraceSlack is how long after its grace period a preempted pod is
// still waited for.
const victimGraceSlack = 30 * time.Second

// recentlyPreempted reports whether the scheduler marked the pod as
// preempted no longer ago than its grace period and victimGraceSlack.
func recentlyPreempted(pod *v1.Pod, now time.Time) bool {
	i := slices.IndexFunc(pod.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler
	})
	if i < 0 {
		return false
	}
	grace := time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, v1.DefaultTerminationGracePeriodSeconds)) * time.Second
	return now.Sub(pod.Status.Conditions[i].LastTransitionTime.Time) <= grace+victimGraceSlack
}

// preempted reports whether the scheduler marked the pod as preempted.
func preempted(pod *v1.Pod) bool {
	return slices.ContainsFunc(pod.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler
	})
}

// PostFilter runs upstream's (which frees allocated claims a pod cannot
// use), then keeps DefaultPreemption from running for a pod that would fit
// once devices already on their way out are free: devices of claims whose
// pods are all gone, which the resourceclaim controller is about to
// deallocate, or released since the cycle began. That is the window after
// a preemptor's victims are gone: the nominated node no longer has a
// terminating pod, so DefaultPreemption would find the pod eligible again
// and preempt more. A refusal names a few of the withheld devices that
// kept the pod off nodes (withheldSummary), once for the whole cycle.
func (pl *DRAScope) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	result, status := pl.postFilter(ctx, state, pod, statuses)
	if status.IsRejected() {
		if note := pl.withheldSummary(ctx, state, pod, statuses); note != "" {
			status = fwk.NewStatus(status.Code(), append(status.Reasons(), note)...)
		}
	}
	return result, status
}

func (pl *DRAScope) postFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
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

// maxReleaseChecks bounds the nodes awaitingRelease tries.
const maxReleaseChecks = 16

// awaitingRelease returns a node where the pod would fit with the devices
// on their way out free: its nominated node first, then the nodes of the
// claims whose pods are all gone. It reads the claims as they are now, not
// as the cycle began: a deallocation seen in between is a device free.
func (pl *DRAScope) awaitingRelease(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) string {
	w := whatIfIn(state)
	if w == nil {
		return ""
	}
	releasing := pl.readReleaseView()
	var nodes []string
	if nominated := pod.Status.NominatedNodeName; nominated != "" {
		nodes = append(nodes, nominated)
	}
	for _, allocation := range releasing.allocations {
		for _, result := range allocation.Devices.Results {
			if node := w.cycle.NodeOf(result.Driver, result.Pool); node != "" && !slices.Contains(nodes, node) {
				nodes = append(nodes, node)
			}
		}
	}
	if len(nodes) == 0 {
		return ""
	}
	inUse, err := pl.manager.claims.ResourceClaimTracker.ListAllAllocatedDevices()
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
		n := w.cycle.Node(nodeInfo.Node())
		n.FreeAllBut(inUse)
		releasing.freeOn(n)
		if results, err := n.Allocate(ctx, w.claims); err == nil && results != nil {
			return name
		}
	}
	return ""
}

// readReleaseView reads the claims as the tracker shows them now: the
// allocations of claims whose consumers are all gone (deleted, or
// finished), which the resourceclaim controller is about to deallocate,
// and every device a claim holds or is being allocated.
func (pl *DRAScope) readReleaseView() releaseView {
	claims, err := pl.claims.List()
	if err != nil {
		return releaseView{}
	}
	view := releaseView{held: sets.New[structured.DeviceID]()}
	// Compared with upstream's in-use set of whole devices: a share holds
	// its device there unless every share is gone.
	holds := allocated.Visitor{Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) {
		view.held.Insert(id)
	}}
	hold := func(allocation *resourceapi.AllocationResult) { allocated.Each(allocation, false, holds) }
	// Allocations in flight under a UID no listed claim has (upstream's
	// claim for extended resources backed by DRA, until PreBind creates
	// it) are held too.
	if pl.manager != nil {
		for _, allocation := range pl.manager.claims.inFlight() {
			hold(allocation)
		}
	}
	for _, claim := range claims {
		allocation := claim.Status.Allocation
		if allocation == nil {
			allocation = pl.claims.GetPendingAllocation(claim.UID)
		}
		if allocation == nil {
			// Listed before its allocation was assumed, asked after the
			// pending entry went (upstream assumes first, then removes):
			// the claim as it is now has it.
			if now, err := pl.claims.Get(claim.Namespace, claim.Name); err == nil && now.UID == claim.UID {
				allocation = now.Status.Allocation
			}
		}
		if allocation == nil {
			continue
		}
		hold(allocation)
		if claim.Status.Allocation != nil && len(claim.Status.ReservedFor) > 0 &&
			!slices.ContainsFunc(claim.Status.ReservedFor, pl.consumerRuns(claim.Namespace)) {
			view.allocations = append(view.allocations, claim.Status.Allocation)
		}
	}
	return view
}

// consumerRuns reports whether a consumer may still use its claim: it is
// not a pod, or a pod that exists, has not finished, and was not preempted
// by the scheduler (within its grace period and victimGraceSlack). A
// victim on its way out frees its claims with it: counted in use, a
// preemptor whose cycle came while a nominated pod's victim still
// terminated chose a victim more for the device that victim was about to
// free (soak seed 1998 of the 1000-case run).
func (pl *DRAScope) consumerRuns(namespace string) func(resourceapi.ResourceClaimConsumerReference) bool {
	return func(consumer resourceapi.ResourceClaimConsumerReference) bool {
		if consumer.APIGroup != "" || consumer.Resource != "pods" {
			return true
		}
		pod, err := pl.pods.Pods(namespace).Get(consumer.Name)
		if err != nil {
			return false
		}
		return pod.UID == consumer.UID && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed &&
			!recentlyPreempted(pod, time.Now())
	}
}
