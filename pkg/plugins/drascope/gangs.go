package drascope

// Backtracking for gangs (docs/gangs.md). Upstream's pod-group cycle runs
// PreFilter, Filter and Reserve for one member after another, and its
// allocator chooses each member's devices without looking ahead: a first
// member's preferred device can leave a later member nothing although
// other choices would place all (kubernetes/kubernetes#138765). When the
// cycle fails, DRAScope asks the allocator for the members' claims
// together, node by node (pkg/gangplan), and, when that places every
// member, steers the members to what it found:
//
//  1. Each member's PreFilter leaves its claims in the pod-group cycle
//     state, and the first also what upstream built its allocator from
//     (the dry-run cycle preemption uses): gangAttempt.record.
//  2. PodGroupPostFilter runs upstream's first (it frees PodGroup claims
//     no member can use). Then, if no member has a claim allocated, in
//     flight or shared, it plans (members the cycle never reached gather
//     their claims now). A plan is kept per member, and the framework's
//     pgSchedulingFunc, which runs the whole group cycle again, checks
//     that the members now place; only then does PodGroupPostFilter
//     report success (so that preemption is not tried).
//  3. In the next cycles, a planned member's PreFilter hands upstream's
//     allocator the slices with every free device not planned for it left
//     out (devices in use stay, so that their counters still count), and
//     keeps the member to its planned node.
//
// A plan lasts planTTL, or until its member reaches PreBind. A cycle in
// which a steered member fails ends it: the PodGroupPostFilter of that
// cycle forgets the plans and does not plan again from a steered view; the
// cycle after it plans afresh.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/gangplan"
	"github.com/drascope/drascope/pkg/metrics"
)

const (
	// planTTL is how long a gang plan steers its members: longer than the
	// scheduler's longest backoff by default (podMaxBackoffSeconds, 10s),
	// after which the group's next cycle comes.
	planTTL = time.Minute
	// allocatorRuns bounds the allocator runs of one plan, and
	// DRAScope.cycleBudget their time, so that an infeasible gang on a
	// large cluster costs a bounded time per cycle.
	allocatorRuns = 256
)

// The results of a gang's planning, as drascope_gang_plans_total counts
// them.
const (
	planPlaced    = "Placed"
	planNone      = "NoPlan"
	planNotPlaced = "NotPlaced"
	planBudget    = "Budget"
	planAbandoned = "Abandoned"
)

const gangAttemptKey fwk.StateKey = Name + "/gang-attempt"

// gangAttempt is what the members' PreFilters of one pod-group cycle
// leave for PodGroupPostFilter.
type gangAttempt struct {
	mu sync.Mutex
	// cycle is the first recorded member's view: before any member of
	// the cycle reserved anything.
	cycle   *dryrun.Cycle
	members map[types.UID]gangplan.Member
	// steered: a member ran under a plan, so cycle is not the whole
	// cluster's view.
	steered bool
}

// Clone shares the attempt: members record themselves in one place.
func (a *gangAttempt) Clone() fwk.StateData { return a }

// gangPlans are the placements members are steered to, by pod UID.
type gangPlans struct {
	mu    sync.Mutex
	byPod map[types.UID]plannedMember
	now   func() time.Time
}

type plannedMember struct {
	gangplan.Placement
	expires time.Time
}

func (p *gangPlans) get(uid types.UID) *gangplan.Placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	planned, ok := p.byPod[uid]
	if !ok {
		return nil
	}
	if p.clock().After(planned.expires) {
		delete(p.byPod, uid)
		return nil
	}
	return &planned.Placement
}

func (p *gangPlans) set(placements map[types.UID]gangplan.Placement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	if p.byPod == nil {
		p.byPod = map[types.UID]plannedMember{}
	}
	for uid, planned := range p.byPod {
		if now.After(planned.expires) {
			delete(p.byPod, uid)
		}
	}
	for uid, placement := range placements {
		p.byPod[uid] = plannedMember{Placement: placement, expires: now.Add(planTTL)}
	}
}

func (p *gangPlans) forget(pods []*v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pod := range pods {
		delete(p.byPod, pod.UID)
	}
}

func (p *gangPlans) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// steering limits, while upstream's PreFilter runs for a planned member,
// the free devices its listing hands out to those planned for the member.
type steering struct {
	allowed atomic.Pointer[sets.Set[structured.DeviceID]]
}

// steerFor returns the plan of a member of a pod group and starts
// steering the listing to it; stop ends the steering.
func (pl *DRAScope) steerFor(pod *v1.Pod) (plan *gangplan.Placement, stop func()) {
	if pl.manager == nil || pod.Spec.SchedulingGroup == nil {
		return nil, func() {}
	}
	plan = pl.gangPlans.get(pod.UID)
	if plan == nil {
		return nil, func() {}
	}
	pl.manager.steering.allowed.Store(&plan.Devices)
	return plan, func() { pl.manager.steering.allowed.Store(nil) }
}

// onlyPlanned returns the slices without the devices that are free and
// not allowed, copying only the slices that change. Devices in use stay:
// the allocator counts the shared counters they consume, and never hands
// them out. A device that allows multiple allocations stays too: a share
// of it may be free and in use at once.
func onlyPlanned(listed []*resourceapi.ResourceSlice, allowed sets.Set[structured.DeviceID], seen *inUseSeen) []*resourceapi.ResourceSlice {
	inUse := func(structured.DeviceID) bool { return false }
	if seen != nil {
		inUse = seen.state.AllocatedDevices.Has
	}
	out := make([]*resourceapi.ResourceSlice, len(listed))
	for i, slice := range listed {
		out[i] = slice
		// nil until a device is left out: then the ones before it.
		var kept []resourceapi.Device
		for j, device := range slice.Spec.Devices {
			id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
			keep := allowed.Has(id) || inUse(id) || (device.AllowMultipleAllocations != nil && *device.AllowMultipleAllocations)
			switch {
			case !keep && kept == nil:
				kept = make([]resourceapi.Device, j, len(slice.Spec.Devices))
				copy(kept, slice.Spec.Devices[:j])
			case keep && kept != nil:
				kept = append(kept, device)
			}
		}
		if kept != nil {
			copied := *slice
			copied.Spec.Devices = kept
			out[i] = &copied
		}
	}
	return out
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

// gangAttemptOf returns the pod-group cycle's attempt, creating it; nil
// outside a pod-group cycle.
func gangAttemptOf(state fwk.CycleState) *gangAttempt {
	group := state.GetPodGroupSchedulingCycle()
	if group == nil {
		return nil
	}
	if attempt := attemptIn(group); attempt != nil {
		return attempt
	}
	attempt := &gangAttempt{members: map[types.UID]gangplan.Member{}}
	group.Write(gangAttemptKey, attempt)
	return attempt
}

// markSteered records that a member ran under a plan.
func (a *gangAttempt) markSteered() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steered = true
}

// record leaves the member's claims and, from the first member, the
// cycle's dry-run view.
func (a *gangAttempt) record(pod *v1.Pod, w *whatIf) {
	if a == nil || w == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cycle == nil {
		a.cycle = w.cycle
	}
	a.members[pod.UID] = gangplan.Member{Pod: pod, Claims: w.claims}
}

// PodGroupPostFilter runs upstream's, then looks for devices for every
// member at once (see the top of this file).
func (pl *DRAScope) PodGroupPostFilter(ctx context.Context, state fwk.PodGroupCycleState, pgInfo fwk.PodGroupInfo, schedule fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	result, status := pl.DynamicResources.PodGroupPostFilter(ctx, state, pgInfo, schedule)
	if pl.manager == nil || status.Code() != fwk.Unschedulable {
		return result, status
	}
	logger := klog.FromContext(ctx)
	pods := pgInfo.GetUnscheduledPods()
	attempt := attemptIn(state)
	if attempt == nil {
		return result, status
	}
	attempt.mu.Lock()
	steered, cycle := attempt.steered, attempt.cycle
	recorded := maps.Clone(attempt.members)
	attempt.mu.Unlock()
	if steered {
		// The plan did not hold (the cluster changed): forget it, and plan
		// in the next cycle from the whole cluster's view.
		pl.gangPlans.forget(pods)
		metrics.ObserveGangPlan(planAbandoned)
		logger.V(3).Info("Gang plan did not place the members; planning again next cycle", "podGroup", klog.KRef(pgInfo.GetNamespace(), pgInfo.GetName()))
		return result, status
	}
	members, ok := pl.gangMembers(pods, recorded)
	if cycle == nil || !ok {
		// A member has claims allocated already, or shares one with
		// another member or the group.
		return result, status
	}
	nodeInfos, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return result, status
	}
	nodes := make([]*v1.Node, 0, len(nodeInfos))
	for _, n := range nodeInfos {
		nodes = append(nodes, n.Node())
	}
	planCtx, cancel := dryrun.NewBudget(pl.cycleBudget).Context(ctx)
	placements, err := gangplan.Plan(planCtx, cycle, nodes, members, allocatorRuns)
	cancel()
	if err != nil || placements == nil {
		outcome := planNone
		if errors.Is(err, gangplan.ErrBudget) {
			outcome = planBudget
		}
		metrics.ObserveGangPlan(outcome)
		logger.V(4).Info("No devices for every gang member at once", "podGroup", klog.KRef(pgInfo.GetNamespace(), pgInfo.GetName()), "err", err)
		return result, status
	}
	pl.gangPlans.set(placements)
	if _, verdict := schedule(ctx); !verdict.IsSuccess() {
		pl.gangPlans.forget(pods)
		metrics.ObserveGangPlan(planNotPlaced)
		logger.V(4).Info("Devices found for every gang member at once, but the members do not place there", "podGroup", klog.KRef(pgInfo.GetNamespace(), pgInfo.GetName()), "verdict", verdict.Message())
		return result, status
	}
	// Success keeps DefaultPreemption from evicting anyone for a gang that
	// fits as it is; the group goes back to the queue and its next cycle,
	// after the group's backoff, follows the plan.
	metrics.ObserveGangPlan(planPlaced)
	logger.V(2).Info("Gang placed by choosing devices for every member at once", "podGroup", klog.KRef(pgInfo.GetNamespace(), pgInfo.GetName()), "members", len(members))
	// Upstream reads the result's nominations on success: never nil.
	return &fwk.PodGroupPostFilterResult{}, fwk.NewStatus(fwk.Success, fmt.Sprintf("%s chose devices for all %d members together; retrying the gang with them", Name, len(members)))
}

// gangMembers returns every member with the claims it needs allocated:
// those its PreFilter recorded and, for members the cycle never reached
// (upstream stops trying members once the gang cannot reach minCount), the
// claims gathered now. ok is false when a member has a claim allocated or
// in flight, one shared with another member, or one it cannot resolve:
// those are upstream's to place.
func (pl *DRAScope) gangMembers(pods []*v1.Pod, recorded map[types.UID]gangplan.Member) (members []gangplan.Member, ok bool) {
	seen := sets.New[types.UID]()
	for _, pod := range pods {
		m, found := recorded[pod.UID]
		if !found {
			claims := pl.claimsOf(pod)
			if claims.unknown > 0 || claims.allocated > 0 || requestsExtendedResources(pod) || !pl.claimsUnchanged(claims) {
				return nil, false
			}
			m = gangplan.Member{Pod: pod, Claims: claims.toAllocate}
		}
		for _, claim := range m.Claims {
			if seen.Has(claim.UID) {
				return nil, false
			}
			seen.Insert(claim.UID)
		}
		members = append(members, m)
	}
	return members, true
}

func attemptIn(state fwk.PodGroupCycleState) *gangAttempt {
	if state == nil {
		return nil
	}
	data, err := state.Read(gangAttemptKey)
	if err != nil {
		return nil
	}
	attempt, _ := data.(*gangAttempt)
	return attempt
}
