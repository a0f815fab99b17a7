package devicescore

import (
	"slices"
	"testing"

	"github.com/drascope/drascope/apis/config"
)

func TestScore(t *testing.T) {
	for _, tc := range []struct {
		strategy  config.ScoringStrategy
		use       Use
		requested int
		want      float64
	}{
		{config.ScoringMostAllocated, Use{Used: 3, Total: 8}, 1, 0.5},
		{config.ScoringMostAllocated, Use{Used: 0, Total: 8}, 1, 0.125},
		{config.ScoringMostAllocated, Use{Used: 8, Total: 8}, 1, 1},
		{config.ScoringLeastAllocated, Use{Used: 3, Total: 8}, 1, 0.5},
		{config.ScoringLeastAllocated, Use{Used: 0, Total: 8}, 2, 0.75},
		{config.ScoringMostAllocated, Use{}, 1, 0},
	} {
		if got := Score(tc.strategy, tc.use, tc.requested); got != tc.want {
			t.Errorf("%s %+v +%d: %v, want %v", tc.strategy, tc.use, tc.requested, got, tc.want)
		}
	}
}

func TestCombine(t *testing.T) {
	const maxScore = 100
	// Nodes a, b, c by index.
	device := []float64{0.9, 0.5, 0.1}
	byIndex := func(i int) float64 { return device[i] }

	// Upstream ranks all alike: the device score decides, over the whole range.
	if got, want := Combine([]int64{0, 0, 0}, byIndex, maxScore), []int64{89, 50, 10}; !slices.Equal(got, want) {
		t.Errorf("uniform upstream scores: %v, want %v", got, want)
	}

	// A prioritized list's first subrequest fits on c only (8 against 7):
	// c comes first however full a and b are; a before b.
	got := Combine([]int64{7, 7, 8}, byIndex, maxScore)
	if want := []int64{44, 25, 55}; !slices.Equal(got, want) {
		t.Errorf("prioritized list: %v, want %v", got, want)
	}
	if !(got[2] > got[0] && got[0] > got[1]) {
		t.Errorf("ranking %v: want c, a, b", got)
	}

	// A full node of the lower rank never ties an empty one of the higher.
	device = []float64{1, 0}
	if got := Combine([]int64{7, 8}, byIndex, maxScore); got[1] <= got[0] {
		t.Errorf("ranking %v: the higher rank must win whatever the devices", got)
	}
}
