package results

import "slices"

// RunOrder is the order in which the harness runs a workload's variants in
// its pair-th pair (from 1); unit tells the workloads of one run apart, so
// that they do not all start with the same variant.
//
// Pairs come in twos, the second the reverse of the first: over an even
// number of pairs every variant runs before each other one as often as
// after it. That matters for the ratios: at 2000 nodes the second run of a
// pair is usually the faster, whichever scheduler it is (docs/perf.md,
// "How the runs are ordered"). A rotation alone would keep the variants'
// cyclic order, so that with three variants or more one would run after
// another in all but one pair of every turn. From one two to the next the order rotates, so that each variant
// also takes each place: with n variants, 2n pairs give each of them every
// place twice.
func RunOrder[T any](variants []T, unit, pair int) []T {
	order := slices.Clone(variants)
	if len(order) == 0 {
		return order
	}
	k := (unit + (pair-1)/2) % len(order)
	order = append(order[k:], order[:k]...)
	if pair%2 == 0 {
		slices.Reverse(order)
	}
	return order
}
