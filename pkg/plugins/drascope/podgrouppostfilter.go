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
//     (the dry-run cycle preemption uses): gangplan.Attempt.
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
//     keeps the member to its planned node (prefilter.go, steerFor).
//
// A plan lasts gangplan.PlanTTL, or until its member reaches PreBind. A
// cycle in which a steered member fails ends it: the PodGroupPostFilter of
// that cycle forgets the plans and does not plan again from a steered
// view; the cycle after it plans afresh.

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/gangplan"
	"github.com/drascope/drascope/pkg/metrics"
)

// allocatorRuns bounds the allocator runs of one plan, and
// DRAScope.cycleBudget their time, so that an infeasible gang on a large
// cluster costs a bounded time per cycle.
const allocatorRuns = 256

// The results of a gang's planning, as drascope_gang_plans_total counts
// them.
const (
	planPlaced    = "Placed"
	planNone      = "NoPlan"
	planNotPlaced = "NotPlaced"
	planBudget    = "Budget"
	planAbandoned = "Abandoned"
)

// PodGroupPostFilter runs upstream's, then looks for devices for every
// member at once (see the top of this file).
func (pl *DRAScope) PodGroupPostFilter(ctx context.Context, state fwk.PodGroupCycleState, pgInfo fwk.PodGroupInfo, schedule fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	result, status := pl.DynamicResources.PodGroupPostFilter(ctx, state, pgInfo, schedule)
	if pl.manager == nil || status.Code() != fwk.Unschedulable {
		return result, status
	}
	attempt := attemptIn(state)
	if attempt == nil {
		return result, status
	}
	logger := klog.FromContext(ctx)
	group := klog.KRef(pgInfo.GetNamespace(), pgInfo.GetName())
	pods := pgInfo.GetUnscheduledPods()
	steered, cycle, recorded := attempt.Recorded()
	if steered {
		// The plan did not hold (the cluster changed): forget it, and plan
		// in the next cycle from the whole cluster's view.
		pl.gangPlans.Forget(pods)
		metrics.ObserveGangPlan(planAbandoned)
		logger.V(3).Info("Gang plan did not place the members; planning again next cycle", "podGroup", group)
		return result, status
	}
	members, ok := pl.gangMembers(pods, recorded)
	if cycle == nil || !ok {
		// A member has claims allocated already, or shares one with
		// another member or the group.
		return result, status
	}
	nodes, err := pl.snapshotNodes()
	if err != nil {
		return result, status
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
		logger.V(4).Info("No devices for every gang member at once", "podGroup", group, "err", err)
		return result, status
	}
	pl.gangPlans.Set(placements)
	if _, verdict := schedule(ctx); !verdict.IsSuccess() {
		pl.gangPlans.Forget(pods)
		metrics.ObserveGangPlan(planNotPlaced)
		logger.V(4).Info("Devices found for every gang member at once, but the members do not place there", "podGroup", group, "verdict", verdict.Message())
		return result, status
	}
	// Success keeps DefaultPreemption from evicting anyone for a gang that
	// fits as it is; the group goes back to the queue and its next cycle,
	// after the group's backoff, follows the plan.
	metrics.ObserveGangPlan(planPlaced)
	logger.V(2).Info("Gang placed by choosing devices for every member at once", "podGroup", group, "members", len(members))
	// Upstream reads the result's nominations on success: never nil.
	return &fwk.PodGroupPostFilterResult{}, fwk.NewStatus(fwk.Success, fmt.Sprintf("%s chose devices for all %d members together; retrying the gang with them", Name, len(members)))
}

// snapshotNodes are the nodes of the scheduler's snapshot.
func (pl *DRAScope) snapshotNodes() ([]*v1.Node, error) {
	nodeInfos, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, err
	}
	nodes := make([]*v1.Node, 0, len(nodeInfos))
	for _, n := range nodeInfos {
		nodes = append(nodes, n.Node())
	}
	return nodes, nil
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
