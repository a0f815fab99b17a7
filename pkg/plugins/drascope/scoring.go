package drascope

import (
	"context"
	"math"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/config"
)

// Device-aware scoring (scoring.strategy, docs/scoring.md). Upstream scores
// a node only by which subrequest of a prioritized list it could allocate
// there. DRAScope keeps that ranking first and ranks the nodes upstream
// ranks alike by how full their node-local devices would be with the pod's:
// MostAllocated packs, so that whole nodes stay free for pods that need many
// devices; LeastAllocated spreads.
//
// The fullness comes from the side cache's snapshots of the nodes' pools
// (what is allocated, in flight, tainted or out of counters), not from a
// second allocator run: upstream keeps Filter's tentative allocation to
// itself. PreScore brings the cache up to date first, so the previous pod's
// devices count. In a gang's preemption dry run, the devices the victims
// give up count as free, as the member's allocator sees them
// (gangpreemption.go).

const scoringStateKey fwk.StateKey = Name + "/scoring"

// scoringState is what PreScore gathered for NormalizeScore.
type scoringState struct {
	// requested is how many devices the pod's claims still to allocate
	// ask for.
	requested int
	// use is, per feasible node, the devices of its node-local pools.
	use map[string]deviceUse
}

// Clone shares the state: it is only read after PreScore.
func (s *scoringState) Clone() fwk.StateData { return s }

// deviceUse counts a node's devices: total, and those a new claim cannot
// get (allocated, in flight, tainted, withheld or out of counters).
type deviceUse struct{ used, total int }

var (
	_ fwk.PreScorePlugin  = &DRAScope{}
	_ fwk.ScoreExtensions = &DRAScope{}
)

// PreScore gathers the device use of the feasible nodes, unless the
// strategy is None or the pod has no device to allocate by claim.
func (pl *DRAScope) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if pl.scoring == config.ScoringNone || pl.pools == nil {
		return nil
	}
	requested, ok := requestedDevices(pl.claimsIn(state, pod))
	if !ok {
		return nil
	}
	// Devices reserved for the previous pod count now, not when the
	// cache's worker gets to them. This recomputes every dirty pool (one
	// or two between consecutive pods; all of a driver's after it
	// republished) and waits for a recompute already running.
	pl.pools.Sync()
	freed := pl.victimsDevicesByPool(state)
	use := make(map[string]deviceUse, len(nodes))
	for _, node := range nodes {
		if node.Node() == nil {
			continue
		}
		var u deviceUse
		for _, snap := range pl.pools.OnNode(node.Node().Name) {
			u.total += snap.Summary.Total
			u.used += max(snap.Summary.Total-snap.Summary.Available-freed[snap.PoolID], 0)
		}
		use[node.Node().Name] = u
	}
	state.Write(scoringStateKey, &scoringState{requested: requested, use: use})
	return nil
}

// ScoreExtensions is DRAScope itself: NormalizeScore combines upstream's
// ranking with the strategy's.
func (pl *DRAScope) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore normalizes upstream's scores as upstream does, or, when
// PreScore gathered device use, ranks nodes by upstream's raw score first
// and by device use within each rank.
func (pl *DRAScope) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	s, ok := fromCycle[*scoringState](state, scoringStateKey)
	if !ok || s == nil {
		return pl.DynamicResources.NormalizeScore(ctx, state, pod, scores)
	}
	combineScores(scores, func(node string) float64 { return deviceScore(pl.scoring, s.use[node], s.requested) })
	return nil
}

// combineScores turns upstream's raw scores into ranks, gives each rank an
// equal band of [0, MaxScore] (the best rank the top band), and places each
// node within its band by its device score (0 to 1), never on the band's
// upper edge. A prioritized list's preference thus always wins; device use
// decides among equals, and alone when upstream ranks every node alike.
// With more ranks than points (over 100), neighbouring ranks share a score.
func combineScores(scores fwk.NodeScoreList, device func(node string) float64) {
	var raw []int64
	for _, s := range scores {
		raw = append(raw, s.Score)
	}
	slices.Sort(raw)
	raw = slices.Compact(raw)
	width := max(fwk.MaxScore/int64(len(raw)), 1)
	for i := range scores {
		rank, _ := slices.BinarySearch(raw, scores[i].Score)
		scores[i].Score = min(int64(rank)*width+int64(math.Round(device(scores[i].Name)*float64(width-1))), fwk.MaxScore)
	}
}

// deviceScore is 0 to 1: how full (MostAllocated) or how empty
// (LeastAllocated) the node's devices would be with requested more in use.
// A node without node-local devices scores 0.
func deviceScore(strategy config.ScoringStrategy, u deviceUse, requested int) float64 {
	if u.total == 0 {
		return 0
	}
	used := float64(min(u.used+requested, u.total)) / float64(u.total)
	if strategy == config.ScoringLeastAllocated {
		return 1 - used
	}
	return used
}

// requestedDevices counts the devices the pod's claims still to allocate
// ask for: a request's count (the first subrequest's, for a prioritized
// list), none for admin access, which uses nothing up, nor for
// allocationMode All, whose count depends on the node; devices a pod gets
// through extended resources are not counted. It reports false when there
// is nothing to score: no device to use up (no claim to allocate, or only
// admin access, as for monitors, which go where upstream puts them).
func requestedDevices(claims *podClaims) (int, bool) {
	n := 0
	for _, claim := range claims.toAllocate {
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil:
				if !ptr.Deref(request.Exactly.AdminAccess, false) {
					n += exactCount(request.Exactly.AllocationMode, request.Exactly.Count)
				}
			case len(request.FirstAvailable) > 0:
				first := request.FirstAvailable[0]
				n += exactCount(first.AllocationMode, first.Count)
			}
		}
	}
	return n, n > 0
}

func exactCount(mode resourceapi.DeviceAllocationMode, count int64) int {
	if mode == resourceapi.DeviceAllocationModeAll {
		return 0
	}
	return int(max(count, 1))
}
