package drascope

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/config"
)

func TestDeviceScore(t *testing.T) {
	for _, tc := range []struct {
		strategy  config.ScoringStrategy
		use       deviceUse
		requested int
		want      float64
	}{
		{config.ScoringMostAllocated, deviceUse{used: 3, total: 8}, 1, 0.5},
		{config.ScoringMostAllocated, deviceUse{used: 0, total: 8}, 1, 0.125},
		{config.ScoringMostAllocated, deviceUse{used: 8, total: 8}, 1, 1},
		{config.ScoringLeastAllocated, deviceUse{used: 3, total: 8}, 1, 0.5},
		{config.ScoringLeastAllocated, deviceUse{used: 0, total: 8}, 2, 0.75},
		{config.ScoringMostAllocated, deviceUse{}, 1, 0},
	} {
		if got := deviceScore(tc.strategy, tc.use, tc.requested); got != tc.want {
			t.Errorf("%s %+v +%d: %v, want %v", tc.strategy, tc.use, tc.requested, got, tc.want)
		}
	}
}

func scoresOf(raw map[string]int64) fwk.NodeScoreList {
	var list fwk.NodeScoreList
	for _, name := range []string{"a", "b", "c"} {
		if score, ok := raw[name]; ok {
			list = append(list, fwk.NodeScore{Name: name, Score: score})
		}
	}
	return list
}

func TestCombineScores(t *testing.T) {
	device := map[string]float64{"a": 0.9, "b": 0.5, "c": 0.1}
	byName := func(node string) float64 { return device[node] }

	// Upstream ranks all alike: the device score decides, over the whole range.
	scores := scoresOf(map[string]int64{"a": 0, "b": 0, "c": 0})
	combineScores(scores, byName)
	if diff := cmp.Diff(scoresOf(map[string]int64{"a": 89, "b": 50, "c": 10}), scores); diff != "" {
		t.Errorf("uniform upstream scores (-want +got):\n%s", diff)
	}

	// A prioritized list's first subrequest fits on c only (8 against 7):
	// c comes first however full a and b are; a before b.
	scores = scoresOf(map[string]int64{"a": 7, "b": 7, "c": 8})
	combineScores(scores, byName)
	if diff := cmp.Diff(scoresOf(map[string]int64{"a": 44, "b": 25, "c": 55}), scores); diff != "" {
		t.Errorf("prioritized list (-want +got):\n%s", diff)
	}
	if !(scores[2].Score > scores[0].Score && scores[0].Score > scores[1].Score) {
		t.Errorf("ranking %v: want c, a, b", scores)
	}

	// A full node of the lower rank never ties an empty one of the higher.
	device = map[string]float64{"a": 1, "c": 0}
	scores = scoresOf(map[string]int64{"a": 7, "c": 8})
	combineScores(scores, byName)
	if scores[1].Score <= scores[0].Score {
		t.Errorf("ranking %v: the higher rank must win whatever the devices", scores)
	}
}

func TestRequestedDevices(t *testing.T) {
	exact := func(name string, count int64, admin bool, mode resourceapi.DeviceAllocationMode) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu", AllocationMode: mode, Count: count, AdminAccess: ptr.To(admin)}}
	}
	claimWith := func(name string, allocated bool, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		c := claim(name, nil, allocated)
		c.Spec.Devices.Requests = requests
		return c
	}
	prioritized := resourceapi.DeviceRequest{Name: "p", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "small", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}
	claims := claimsByName{claims: map[string]*resourceapi.ResourceClaim{
		"team/two":       claimWith("two", false, exact("a", 2, false, resourceapi.DeviceAllocationModeExactCount)),
		"team/monitor":   claimWith("monitor", false, exact("m", 1, true, resourceapi.DeviceAllocationModeExactCount)),
		"team/all":       claimWith("all", false, exact("x", 0, false, resourceapi.DeviceAllocationModeAll)),
		"team/listed":    claimWith("listed", false, prioritized),
		"team/allocated": claimWith("allocated", true, exact("a", 3, false, resourceapi.DeviceAllocationModeExactCount)),
	}}
	pl := &DRAScope{claims: claims}
	for _, tc := range []struct {
		claims []string
		want   int
		ok     bool
	}{
		{[]string{"two", "monitor"}, 2, true},
		{[]string{"all"}, 0, false},
		{[]string{"monitor"}, 0, false},
		{[]string{"listed"}, 4, true},
		{[]string{"allocated"}, 0, false},
		{[]string{"missing"}, 0, false},
	} {
		got, ok := requestedDevices(pl.claimsOf(podWithClaims(tc.claims...)))
		if got != tc.want || ok != tc.ok {
			t.Errorf("claims %v: %d, %v; want %d, %v", tc.claims, got, ok, tc.want, tc.ok)
		}
	}
}

// With the strategy None, PreScore gathers nothing, and NormalizeScore is
// upstream's.
func TestScoringNoneAddsNothing(t *testing.T) {
	pl := &DRAScope{scoring: config.ScoringNone, claims: claimsByName{claims: map[string]*resourceapi.ResourceClaim{
		"team/two": claim("two", nil, false),
	}}}
	state := framework.NewCycleState()
	if status := pl.PreScore(context.Background(), state, podWithClaims("two"), nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	if _, err := state.Read(scoringStateKey); err == nil {
		t.Error("PreScore wrote scoring state under the strategy None")
	}
}
