package nodeprune_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/nodeprune"
)

// The differential test: random clusters and claims (internal/dracases),
// and for each node upstream's allocator (what DynamicResources' Filter
// runs, over the same in-use set) against nodeprune's candidates. Every
// node the allocator accepts must be a candidate.

// The other tests of this package use the differential test's drivers and
// classes.
const (
	gpuDriver = dracases.GPUDriver
	nicDriver = dracases.NICDriver
)

var testClasses = dracases.Classes

// outcome counts what the cases exercised, so that a generator that stops
// producing interesting cases fails the test rather than passing it.
type outcome struct {
	// cases ran; pruned of them left some node out; acceptedWhenPruned
	// counts the nodes the allocator accepted in those (each one a check
	// that could have failed).
	cases, pruned, acceptedWhenPruned, keptRefused int
	// comparedRestricted: candidates on which the allocator over the
	// pools reaching the candidates was compared with the whole one.
	comparedRestricted int
}

// featureSets are dracases' and the stable allocator with partitionable
// devices, which reads slices with shared counters on every node.
var featureSets = func() map[string]structured.Features {
	sets := maps.Clone(dracases.FeatureSets)
	sets["stable-partitionable"] = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}
	return sets
}()

// check runs one case: the allocator of each feature set on every node,
// against the candidates.
func check(t *testing.T, seed uint64, o *outcome) {
	t.Helper()
	c := dracases.New(seed)
	// The device IDs cached as the plugin caches them: the second pass
	// reads them from the first's cache and must answer the same.
	view := nodeprune.View{Slices: c.Slices, InUse: c.InUse, Withheld: c.Withheld, IDs: &nodeprune.DeviceIDs{}}
	names, all := nodeprune.Candidates(c.Claims, dracases.Classes.Get, view, c.Nodes)
	if again, allAgain := nodeprune.Candidates(c.Claims, dracases.Classes.Get, view, c.Nodes); allAgain != all || !again.Equal(names) {
		t.Fatalf("seed %d: with cached device IDs the candidates are %v (all %v), first %v (all %v)", seed, sets.List(again), allAgain, sets.List(names), all)
	}
	o.cases++
	if !all {
		o.pruned++
	}
	// What DRAScope hands upstream's allocator after pruning: the slices of
	// the pools that reach a candidate.
	for setName, features := range featureSets {
		allocator, err := allocatorOver(features, c.InUse, c.Slices)
		if err != nil {
			t.Fatalf("seed %d, features %s: building the allocator: %v", seed, setName, err)
		}
		reaching := c.Slices
		if !all {
			reaching = nodeprune.PoolsReaching(c.Slices, names, nodeprune.CountersReachEveryNode(features))
		}
		restricted, err := allocatorOver(features, c.InUse, reaching)
		if err != nil {
			t.Fatalf("seed %d, features %s: building the allocator over the pools reaching the candidates: %v", seed, setName, err)
		}
		for _, node := range c.Nodes {
			results, err := allocator.Allocate(context.Background(), node, c.Claims)
			accepted := err == nil && len(results) == len(c.Claims)
			kept := all || names.Has(node.Name)
			if kept && !all {
				// On a candidate, the allocator over the pools that reach
				// the candidates answers exactly as the one over every
				// slice: the same devices, or the same refusal.
				again, errAgain := restricted.Allocate(context.Background(), node, c.Claims)
				same := (err == nil) == (errAgain == nil) && len(results) == len(again)
				if !strings.HasPrefix(setName, "ga") && !strings.HasPrefix(setName, "stable") {
					// The stable allocator ("ga", "stable-partitionable")
					// visits pools in map order, so its choice may differ
					// between two runs over the same slices; the others
					// sort the pools.
					same = same && apiequality.Semantic.DeepEqual(withoutShareIDs(results), withoutShareIDs(again))
				}
				if !same {
					t.Errorf("seed %d, features %s, %s: over every slice the allocator gives %v (error %v); over the %d slices of the pools reaching %v, %v (error %v)",
						seed, setName, node.Name, results, err, len(reaching), sets.List(names), again, errAgain)
				}
				o.comparedRestricted++
			}
			if accepted && !all {
				o.acceptedWhenPruned++
			}
			if accepted && !kept {
				t.Errorf("seed %d, features %s: the allocator accepts %s, which Candidates dropped (candidates %v)\nclaims: %s\nin use: %v\nwithheld: %v",
					seed, setName, node.Name, sets.List(names), dracases.DescribeClaims(c.Claims), c.InUse.UnsortedList(), c.Withheld.UnsortedList())
			}
			if kept && !accepted && !all {
				o.keptRefused++
			}
		}
	}
}

// withoutShareIDs are the results with each share's ID left out: the
// allocator makes a new one for every allocation of a shared device.
func withoutShareIDs(results []resourceapi.AllocationResult) []resourceapi.AllocationResult {
	out := make([]resourceapi.AllocationResult, len(results))
	for i, result := range results {
		result.Devices.Results = slices.Clone(result.Devices.Results)
		for j := range result.Devices.Results {
			result.Devices.Results[j].ShareID = nil
		}
		out[i] = result
	}
	return out
}

// allocatorOver is upstream's allocator of the feature set over the in-use
// set and slices, as DynamicResources' PreFilter builds it.
func allocatorOver(features structured.Features, inUse sets.Set[structured.DeviceID], slices []*resourceapi.ResourceSlice) (structured.Allocator, error) {
	return structured.NewAllocator(context.Background(), features, structured.AllocatedState{
		AllocatedDevices:         inUse,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}, dracases.Classes, slices, dracases.CEL)
}

// TestCandidatesKeepEveryNodeTheAllocatorAccepts runs 3000 seeded cases,
// each under every feature set.
func TestCandidatesKeepEveryNodeTheAllocatorAccepts(t *testing.T) {
	var o outcome
	for seed := range uint64(3000) {
		check(t, seed, &o)
	}
	t.Logf("%d cases: %d pruned some node; in those, %d node verdicts accepted, %d kept nodes refused by the allocator, %d compared with the allocator over the pools reaching the candidates",
		o.cases, o.pruned, o.acceptedWhenPruned, o.keptRefused, o.comparedRestricted)
	// The cases must exercise both sides: pruning that happens, and, where
	// it does, nodes the allocator accepts.
	if o.pruned < o.cases/5 || o.acceptedWhenPruned < o.cases/10 {
		t.Errorf("the generator produced too few interesting cases: %+v", o)
	}
}

// FuzzCandidates explores more seeds: go test -fuzz FuzzCandidates ./pkg/nodeprune
func FuzzCandidates(f *testing.F) {
	for _, seed := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		check(t, seed, &outcome{})
	})
}
