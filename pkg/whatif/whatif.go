// Package whatif answers the device side of a scheduling cycle's what-ifs:
// would the pod's claims fit on this node if these pods were gone
// (preemption's victims) and those there (pods nominated to the node)?
//
// Upstream's DynamicResources cannot take part in DefaultPreemption: it
// refuses a device shortage as UnschedulableAndUnresolvable, which
// preemption never looks past; it has no PreFilterExtensions, so removing a
// victim changes nothing it knows; and its allocator, built once in
// PreFilter over a fixed in-use set, lives in cycle state whose Clone
// returns the same pointer. The DRAScope plugin (pkg/plugins/drascope)
// changes all three with a WhatIf: PreFilter keeps in one what upstream's
// allocator was built from (cloned independently), RemovePod and AddPod
// record the pods a dry run removes and adds (Remove, Add), and Filter,
// when that changed anything, asks Fits. DefaultPreemption itself (victim
// choice, PDBs, preemptionPolicy, the events) runs unchanged
// (docs/preemption.md). It knows nothing of the scheduler framework.
package whatif

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/gangpreempt"
	"github.com/drascope/drascope/pkg/victims"
)

// GuardedFrom is how many devices a pod must ask for before Filter checks
// that a node has enough free ones before upstream's allocator searches
// (TooFewDevices). The allocator is a backtracking search with no such
// check: asked for more identical devices than a node has free, it tries
// every assignment of devices to requests before it gives up, and only
// upstream's Filter timeout (10s by default) ends it, for each node and
// each attempt, while the scheduling loop, which serves every profile,
// waits. A pod asking for one or two devices cannot make it search long;
// for those the check would only cost time on the hot path.
const GuardedFrom = 3

// WhatIf is the device side of a cycle's what-ifs: what upstream's
// allocator was built from, and the pods a dry run removed from or added to
// the node being evaluated.
type WhatIf struct {
	// cycle, claims and view are shared by every clone: they are only
	// read.
	cycle  *dryrun.Cycle
	claims []*resourceapi.ResourceClaim
	view   victims.View
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
	// In a pod-group preemption's dry run (pkg/gangpreempt): dryRun is
	// the run, chosen (shared by every clone) the devices the member's
	// Reserve put in flight, reinstated (each clone's own) the victims
	// the run put back; kept are the devices in use for no claim (held,
	// withheld), which the member's allocator never gets.
	dryRun     *gangpreempt.DryRun
	chosen     sets.Set[structured.DeviceID]
	reinstated sets.Set[types.UID]
	kept       sets.Set[structured.DeviceID]
	// withheld are the cycle's devices withheld as Unhealthy, shared by
	// every clone.
	withheld sets.Set[structured.DeviceID]
	// guarded: the claims ask for enough devices that Filter checks a
	// node's free devices before upstream's search (TooFewDevices).
	guarded bool
}

// releasing is a cycle's victims.Release, read once.
type releasing struct {
	once    sync.Once
	release victims.Release
}

// Options are what a cycle's WhatIf starts from.
type Options struct {
	// Allocating is the scheduler's allocator set-up; State, Kept and
	// Slices are what upstream's allocator was built from this cycle,
	// Kept the devices of State in use for no claim (held, withheld),
	// Withheld those withheld as Unhealthy.
	Allocating     dryrun.Allocating
	State          structured.AllocatedState
	Kept, Withheld sets.Set[structured.DeviceID]
	Slices         []*resourceapi.ResourceSlice
	// Claims are the pod's, all still to allocate; Wanted is how many
	// devices they ask for (GuardedFrom).
	Claims []*resourceapi.ResourceClaim
	Wanted int
	// Budget bounds the cycle's dry runs together, each kind apart.
	Budget time.Duration
	View   victims.View
}

// New keeps what a cycle's allocator was built from.
func New(o Options) *WhatIf {
	state := o.State
	if state.AllocatedSharedDeviceIDs == nil {
		state.AllocatedSharedDeviceIDs = sets.New[structured.SharedDeviceID]()
	}
	if state.AggregatedCapacity == nil {
		state.AggregatedCapacity = structured.NewConsumedCapacityCollection()
	}
	return &WhatIf{
		cycle:            dryrun.NewCycle(o.Allocating, state, o.Kept, o.Slices),
		claims:           o.Claims,
		view:             o.View,
		removed:          map[types.UID]*v1.Pod{},
		releasing:        &releasing{},
		preemptionBudget: dryrun.NewBudget(o.Budget),
		nominatedBudget:  dryrun.NewBudget(o.Budget),
		withheld:         o.Withheld,
		guarded:          o.Wanted >= GuardedFrom,
	}
}

// Clone copies what each clone keeps of its own.
func (w *WhatIf) Clone() *WhatIf {
	clone := *w
	clone.removed = maps.Clone(w.removed)
	clone.added = slices.Clone(w.added)
	clone.reinstated = w.reinstated.Clone()
	return &clone
}

// Cycle is the dry-run view of the cycle's allocator; Claims the pod's.
func (w *WhatIf) Cycle() *dryrun.Cycle                 { return w.cycle }
func (w *WhatIf) Claims() []*resourceapi.ResourceClaim { return w.claims }

// Changed reports whether a dry run removed or added a pod.
func (w *WhatIf) Changed() bool { return len(w.removed) > 0 || len(w.added) > 0 || w.preempting }

// Removed are the pods a dry run removed.
func (w *WhatIf) Removed() map[types.UID]*v1.Pod { return w.removed }

// Remove records a pod a dry run removes from the node: a victim, or, in a
// pod-group preemption, a reinstated victim taken out again.
func (w *WhatIf) Remove(pod *v1.Pod) {
	if len(pod.Spec.ResourceClaims) == 0 || w.unreinstate(pod) {
		return
	}
	if i := slices.IndexFunc(w.added, func(p *v1.Pod) bool { return p.UID == pod.UID }); i >= 0 {
		w.added = slices.Delete(w.added, i, i+1)
		return
	}
	w.removed[pod.UID] = pod
	w.preempting = true
}

// Add undoes Remove for a reprieved victim, and records any other pod as
// one whose devices come first: a pod nominated to the node, of priority
// at least the pod's.
func (w *WhatIf) Add(pod *v1.Pod) {
	if len(pod.Spec.ResourceClaims) == 0 || w.reinstate(pod) {
		return
	}
	if _, ok := w.removed[pod.UID]; ok {
		delete(w.removed, pod.UID)
		return
	}
	w.added = append(w.added, pod)
}

// Guarded reports whether the claims ask for enough devices (GuardedFrom)
// that TooFewDevices counts before upstream's search.
func (w *WhatIf) Guarded() bool { return w.guarded }

// TooFewDevices reports whether the node certainly cannot hold the pod's
// claims because they ask for more devices of their drivers than the node
// has free (dryrun.Node.MayFit: counters included, selectors not), so that
// Filter refuses the node without upstream's search. Devices withheld as
// Unhealthy count as free here: Filter's own refusal explains those, and
// retries the pod when they recover.
func (w *WhatIf) TooFewDevices(node *v1.Node) bool {
	if w == nil || !w.guarded || node == nil {
		return false
	}
	n := w.cycle.Node(node)
	n.FreeKept(w.withheld)
	return !n.MayFit(w.claims)
}

// Release is the cycle's release view, read once.
func (w *WhatIf) Release() victims.Release {
	if w.releasing == nil {
		return victims.Release{}
	}
	w.releasing.once.Do(func() { w.releasing.release = w.view.Releasing() })
	return w.releasing.release
}

// Verdict is what Fits found.
type Verdict struct {
	// Fit: the claims fit.
	Fit bool
	// TimedOut: the budget ended the search; Err: the allocator failed
	// for another reason than a shortage.
	TimedOut bool
	Err      error
	// NetworkPools: the node reaches network-attached pools, whose
	// devices pods of other nodes may hold.
	NetworkPools bool
	// Nominated are the pods nominated to the node whose devices came
	// first.
	Nominated []*v1.Pod
	// Results are, when the claims fit, their allocations, in the order of
	// Claims.
	Results []resourceapi.AllocationResult
}

// Fits checks whether the pod's claims fit on the node with the devices of
// the removed pods' claims free and those of the added pods' claims taken.
// onNode are the node's pods that use claims.
func (w *WhatIf) Fits(ctx context.Context, node *v1.Node, onNode []*v1.Pod) Verdict {
	budget := w.nominatedBudget
	if w.preempting {
		budget = w.preemptionBudget
	}
	ctx, cancel := budget.Context(ctx)
	defer cancel()
	n := w.cycle.Node(node)
	for _, allocation := range w.view.FreedBy(w.removed, w.removed, append(slices.Clone(w.added), onNode...)) {
		n.Free(allocation)
	}
	if w.preempting {
		// A preemption dry run: devices whose pods are gone are as good
		// as free. Counted in use, they would make preemption choose
		// victims for devices already on their way to the preemptor
		// (or to a pod nominated before it).
		w.Release().FreeOn(n)
	}
	var verdict Verdict
	var keptClasses sets.Set[string]
	for _, other := range w.added {
		switch w.take(ctx, n, other) {
		case tookDevices:
			verdict.Nominated = append(verdict.Nominated, other)
		case shortOfDevices:
			// Its victims' devices are not all free yet. Until they
			// are, it keeps every device of the classes it asks for,
			// as the framework keeps a nominated pod's CPU whether or
			// not it fits yet.
			verdict.Nominated = append(verdict.Nominated, other)
			keptClasses = keptClasses.Union(victims.DeviceClassesOf(w.view.ToAllocate(other, nil)))
		}
	}
	var results []resourceapi.AllocationResult
	var err error
	if !victims.DeviceClassesOf(w.claims).HasAny(keptClasses.UnsortedList()...) {
		results, err = n.Allocate(ctx, w.claims)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		verdict.TimedOut = true
	case err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode):
		verdict.Err = err
	case results != nil:
		verdict.Fit, verdict.Results = true, results
	}
	verdict.NetworkPools = n.ReachesNetworkPools()
	return verdict
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
func (w *WhatIf) take(ctx context.Context, n *dryrun.Node, pod *v1.Pod) taken {
	toAllocate := w.view.ToAllocate(pod, w.claims)
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

// LowerPriorityHold reports whether pods of lower priority than pod among
// onNode (the node's pods), other than those removed already, hold devices
// that preempting them would free.
func LowerPriorityHold(view victims.View, pod *v1.Pod, onNode []*v1.Pod, removed map[types.UID]*v1.Pod) bool {
	priority := corev1helpers.PodPriority(pod)
	lower := map[types.UID]*v1.Pod{}
	var withClaims []*v1.Pod
	for _, other := range onNode {
		if len(other.Spec.ResourceClaims) == 0 {
			continue
		}
		withClaims = append(withClaims, other)
		if _, ok := removed[other.UID]; !ok && corev1helpers.PodPriority(other) < priority {
			lower[other.UID] = other
		}
	}
	if len(lower) == 0 {
		return false
	}
	gone := maps.Clone(lower)
	maps.Copy(gone, removed)
	return slices.ContainsFunc(view.FreedBy(lower, gone, withClaims), allocated.HoldsAny)
}

// AwaitingVictims reports whether a preemptor of priority, nominated to
// node, fits there once the devices its victims leave are free: its
// victims are the node's pods (onNode) of lower priority holding claims
// that the scheduler marked preempted, for their grace period and
// victims.GraceSlack after (a victim stuck terminating does not hold the
// preemptor for ever), and the pods gone whose claims are still allocated.
// False when nothing is leaving the node, or when the pod does not fit
// even then (its nomination is stale: a pod of higher priority took the
// devices).
func (w *WhatIf) AwaitingVictims(ctx context.Context, node *v1.Node, onNode []*v1.Pod, priority int32, now time.Time) bool {
	leaving := map[types.UID]*v1.Pod{}
	var withClaims []*v1.Pod
	for _, other := range onNode {
		if len(other.Spec.ResourceClaims) == 0 {
			continue
		}
		withClaims = append(withClaims, other)
		if corev1helpers.PodPriority(other) < priority && victims.RecentlyPreempted(other, now) {
			leaving[other.UID] = other
		}
	}
	n := w.cycle.Node(node)
	for _, allocation := range w.view.FreedBy(leaving, leaving, withClaims) {
		n.Free(allocation)
	}
	// Devices leave the node while its victims' claims are on their way
	// to deallocation, and a moment after (Release.Held): FreeOn says
	// whether it freed any in the node's share (its own pools and the
	// network-attached ones it reaches), and a releasing claim of the
	// node's pools counts even when the cycle has its devices free already.
	release := w.Release()
	freeing := release.FreeOn(n)
	for _, allocation := range release.Allocations {
		for _, result := range allocation.Devices.Results {
			if w.cycle.NodeOf(result.Driver, result.Pool) == node.Name {
				freeing = true
			}
		}
	}
	if len(leaving) == 0 && !freeing {
		return false
	}
	results, err := n.Allocate(ctx, w.claims)
	return err == nil && results != nil
}

// NodesOfReleasing are the nodes of the pools of the allocations on their
// way out.
func (w *WhatIf) NodesOfReleasing(release victims.Release) []string {
	var nodes []string
	for _, allocation := range release.Allocations {
		for _, result := range allocation.Devices.Results {
			if node := w.cycle.NodeOf(result.Driver, result.Pool); node != "" && !slices.Contains(nodes, node) {
				nodes = append(nodes, node)
			}
		}
	}
	return nodes
}

// FitsOnceReleased reports whether the pod's claims fit on the node with
// every device no claim holds (in use is inUse, the tracker's now) and
// those of release free.
func (w *WhatIf) FitsOnceReleased(ctx context.Context, node *v1.Node, inUse sets.Set[structured.DeviceID], release victims.Release) bool {
	n := w.cycle.Node(node)
	n.FreeAllBut(inUse)
	release.FreeOn(n)
	results, err := n.Allocate(ctx, w.claims)
	return err == nil && results != nil
}

// InDryRun makes the what-if follow a gang member in a pod-group
// preemption's dry run: what its Reserve chooses (Chose), and the victims
// the run puts back (Add, Remove). kept are the devices the cycle's
// in-use set holds for no claim.
func (w *WhatIf) InDryRun(p *gangpreempt.DryRun, kept sets.Set[structured.DeviceID]) {
	w.dryRun, w.chosen, w.reinstated = p, sets.New[structured.DeviceID](), sets.New[types.UID]()
	w.kept = kept
}

// DryRun is the pod-group preemption the what-if follows, or nil.
func (w *WhatIf) DryRun() *gangpreempt.DryRun {
	if w == nil {
		return nil
	}
	return w.dryRun
}

// Chose records, in a dry run, the devices of the allocations Reserve put
// in flight for the member's claims (pending looks them up); shares says
// the allocator tracks shared devices.
func (w *WhatIf) Chose(pending func(types.UID) *resourceapi.AllocationResult, shares bool) {
	if w == nil || w.dryRun == nil {
		return
	}
	for _, claim := range w.claims {
		allocated.Each(pending(claim.UID), shares, allocated.Visitor{
			Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { w.chosen.Insert(id) },
		})
	}
}

// reinstate records a victim the dry run puts back; false when pod is no
// victim whose devices were freed.
func (w *WhatIf) reinstate(pod *v1.Pod) bool {
	if w.dryRun == nil || !w.dryRun.FreesDevices(pod.UID) {
		return false
	}
	w.reinstated.Insert(pod.UID)
	return true
}

// unreinstate undoes reinstate; false when pod was not reinstated.
func (w *WhatIf) unreinstate(pod *v1.Pod) bool {
	if w.dryRun == nil || !w.reinstated.Has(pod.UID) {
		return false
	}
	w.reinstated.Delete(pod.UID)
	return true
}

// ReinstatedConflict reports whether a victim put back holds a device the
// member chose in the dry run (or one on the same counter set): the member
// must then fail, so that the victim stays one.
func (w *WhatIf) ReinstatedConflict() bool {
	if w == nil || w.dryRun == nil || len(w.reinstated) == 0 {
		return false
	}
	return w.dryRun.Conflict(w.chosen, w.reinstated)
}

// FreeByPool counts, per pool, the victims' devices a pod-group
// preemption's dry run hands the member as free now, less taken (in flight
// for another member); nil outside a dry run.
func (w *WhatIf) FreeByPool(taken sets.Set[structured.DeviceID]) map[drausage.PoolID]int {
	if w == nil || w.dryRun == nil {
		return nil
	}
	return w.dryRun.FreeByPool(taken, w.kept)
}
