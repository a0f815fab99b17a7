package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/pkg/devicescore"
	"github.com/drascope/drascope/pkg/drausage"
)

// Device-aware scoring (scoring.strategy, docs/scoring.md). Upstream scores
// a node only by which subrequest of a prioritized list it could allocate
// there. DRAScope keeps that ranking first and ranks the nodes upstream
// ranks alike by how full their node-local devices would be with the pod's
// (pkg/devicescore): MostAllocated packs, so that whole nodes stay free for
// pods that need many devices; LeastAllocated spreads.
//
// The fullness comes from the side cache's snapshots of the nodes' pools
// (what is allocated, in flight, tainted or out of counters), not from a
// second allocator run: upstream keeps Filter's tentative allocation to
// itself. PreScore brings the cache up to date first, so the previous pod's
// devices count. In a gang's preemption dry run, the devices the victims
// give up count as free, as the member's allocator sees them.

// PreScore gathers the device use of the feasible nodes (scoringKey),
// unless the strategy is None or the pod has no device to allocate by
// claim.
func (pl *DRAScope) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if pl.scoring == config.ScoringNone || pl.pools == nil {
		return nil
	}
	requested, ok := devicescore.Requested(pl.claimsIn(state, pod).toAllocate)
	if !ok {
		return nil
	}
	// Devices reserved for the previous pod count now, not when the
	// cache's worker gets to them. This recomputes every dirty pool (one
	// or two between consecutive pods; all of a driver's after it
	// republished) and waits for a recompute already running.
	pl.pools.Sync()
	var freed map[drausage.PoolID]int
	if w := whatIfIn(state); w.DryRun() != nil && pl.manager != nil {
		// Counted free, a gang packs onto the victims' nodes as it would
		// onto free ones, and preemption spares the victims of the nodes
		// it leaves alone.
		freed = w.FreeByPool(pl.manager.Claims().InFlightDevices(pl.allocating.Features.ConsumableCapacity))
	}
	use := make(map[string]devicescore.Use, len(nodes))
	for _, node := range nodes {
		if node.Node() == nil {
			continue
		}
		var u devicescore.Use
		for _, snap := range pl.pools.OnNode(node.Node().Name) {
			u.Total += snap.Summary.Total
			u.Used += max(snap.Summary.Total-snap.Summary.Available-freed[snap.PoolID], 0)
		}
		use[node.Node().Name] = u
	}
	state.Write(scoringKey, &scoringState{requested: requested, use: use})
	return nil
}

// ScoreExtensions is DRAScope itself: NormalizeScore combines upstream's
// ranking with the strategy's.
func (pl *DRAScope) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore normalizes upstream's scores as upstream does, or, when
// PreScore gathered device use, ranks nodes by upstream's raw score first
// and by device use within each rank (devicescore.Combine).
func (pl *DRAScope) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	s, ok := fromCycle[*scoringState](state, scoringKey)
	if !ok || s == nil {
		return pl.DynamicResources.NormalizeScore(ctx, state, pod, scores)
	}
	raw := make([]int64, len(scores))
	for i := range scores {
		raw[i] = scores[i].Score
	}
	device := func(i int) float64 { return devicescore.Score(pl.scoring, s.use[scores[i].Name], s.requested) }
	for i, combined := range devicescore.Combine(raw, device, fwk.MaxScore) {
		scores[i].Score = combined
	}
	return nil
}
