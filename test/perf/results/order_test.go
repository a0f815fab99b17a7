package results

import (
	"fmt"
	"slices"
	"testing"
)

func TestRunOrderBalancesEveryTwoPairs(t *testing.T) {
	// Up to eight: the most variants one workload runs with.
	for n := 1; n <= 8; n++ {
		variants := make([]string, n)
		for i := range variants {
			variants[i] = fmt.Sprint("v", i)
		}
		for unit := range 2*n + 1 {
			if first := RunOrder(variants, unit, 1)[0]; first != variants[unit%n] {
				t.Errorf("%d variants, unit %d: the first pair starts with %s, want %s: workloads should not all start alike", n, unit, first, variants[unit%n])
			}
			// before[a][b]: how often a ran before b.
			before := map[string]map[string]int{}
			places := map[string]map[int]int{}
			for _, v := range variants {
				before[v], places[v] = map[string]int{}, map[int]int{}
			}
			for pair := 1; pair <= 2*n; pair++ {
				order := RunOrder(variants, unit, pair)
				if got := slices.Sorted(slices.Values(order)); !slices.Equal(got, variants) {
					t.Fatalf("%d variants, unit %d, pair %d: order %v does not hold each variant once", n, unit, pair, order)
				}
				for i, a := range order {
					places[a][i]++
					for _, b := range order[i+1:] {
						before[a][b]++
					}
				}
				if pair%2 != 0 {
					continue
				}
				for i, a := range variants {
					for _, b := range variants[i+1:] {
						if before[a][b] != before[b][a] {
							t.Errorf("%d variants, unit %d, after pair %d: %s ran before %s %d times, after it %d times", n, unit, pair, a, b, before[a][b], before[b][a])
						}
					}
				}
			}
			for _, v := range variants {
				for place := range n {
					if places[v][place] != 2 {
						t.Errorf("%d variants, unit %d: over %d pairs %s ran in place %d %d times, want 2", n, unit, 2*n, v, place+1, places[v][place])
					}
				}
			}
		}
	}
}

func TestRunOrderLeavesItsArgumentAlone(t *testing.T) {
	// With room to spare behind it too, where an append could write.
	roomy := make([]string, 3, 8)
	copy(roomy, []string{"a", "b", "c"})
	for _, variants := range [][]string{{"a", "b", "c"}, roomy} {
		for pair := 1; pair <= 4; pair++ {
			RunOrder(variants, 1, pair)
		}
		if !slices.Equal(variants, []string{"a", "b", "c"}) || !slices.Equal(variants[:cap(variants)][3:], make([]string, cap(variants)-3)) {
			t.Errorf("RunOrder changed its argument to %v (capacity %d: %v)", variants, cap(variants), variants[:cap(variants)])
		}
	}
}
