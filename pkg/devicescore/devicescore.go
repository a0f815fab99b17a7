// Package devicescore is the arithmetic of DRAScope's device-aware scoring
// (scoring.strategy, docs/scoring.md): how full a node's devices would be
// with a pod's, and how that ranks nodes within the ranks upstream's
// DynamicResources gives them. Where the fullness comes from (the side
// cache's pool snapshots) and when scoring runs are the plugin's
// (pkg/plugins/drascope, score.go).
package devicescore

import (
	"math"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/config"
)

// Use counts a node's devices: total, and those a new claim cannot get
// (allocated, in flight, tainted, withheld or out of counters).
type Use struct{ Used, Total int }

// Score is 0 to 1: how full (MostAllocated) or how empty (LeastAllocated)
// the node's devices would be with requested more in use. A node without
// node-local devices scores 0.
func Score(strategy config.ScoringStrategy, u Use, requested int) float64 {
	if u.Total == 0 {
		return 0
	}
	used := float64(min(u.Used+requested, u.Total)) / float64(u.Total)
	if strategy == config.ScoringLeastAllocated {
		return 1 - used
	}
	return used
}

// Combine turns upstream's raw scores into ranks, gives each rank an equal
// band of [0, maxScore] (the best rank the top band), and places each node
// within its band by its device score (0 to 1, device(i) for scores[i]),
// never on the band's upper edge. A prioritized list's preference thus
// always wins; device use decides among equals, and alone when upstream
// ranks every node alike. With more ranks than points, neighbouring ranks
// share a score. It returns the combined scores, in the same order.
func Combine(scores []int64, device func(i int) float64, maxScore int64) []int64 {
	raw := slices.Clone(scores)
	slices.Sort(raw)
	raw = slices.Compact(raw)
	width := max(maxScore/int64(len(raw)), 1)
	out := make([]int64, len(scores))
	for i, score := range scores {
		rank, _ := slices.BinarySearch(raw, score)
		out[i] = min(int64(rank)*width+int64(math.Round(device(i)*float64(width-1))), maxScore)
	}
	return out
}

// Requested counts the devices the claims still to allocate ask for: a
// request's count (the first subrequest's, for a prioritized list), none
// for admin access, which uses nothing up, nor for allocationMode All,
// whose count depends on the node; devices a pod gets through extended
// resources are not counted. It reports false when there is nothing to
// score: no device to use up (no claim to allocate, or only admin access,
// as for monitors, which go where upstream puts them).
func Requested(toAllocate []*resourceapi.ResourceClaim) (int, bool) {
	n := 0
	for _, claim := range toAllocate {
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
