package nodeprune

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// PoolsReaching returns, in their order, the slices of every pool that has
// a slice on one of nodes or a slice not bound to one node (a node
// selector, all nodes, devices that each select nodes), and, when
// countersEverywhere, a slice with shared counters: everything upstream's
// allocator reads when it allocates on one of those nodes. In v1.37.2 its
// incubating and experimental implementations (structured/internal)
// gather, for a node, the slices with that node's name and the slices not
// bound to one node; its stable one also takes every slice with shared
// counters, whatever node it names (CountersReachEveryNode). Each looks at
// a pool's other slices (checkSlicesInPool, for its generation and count)
// only when those leave the pool incomplete, so a pool is kept whole. An
// allocator built from the result answers as one built from every slice,
// on each of nodes.
func PoolsReaching(slices []*resourceapi.ResourceSlice, nodes sets.Set[string], countersEverywhere bool) []*resourceapi.ResourceSlice {
	type poolID struct{ driver, pool string }
	reaching := map[poolID]struct{}{}
	kept := make([]bool, len(slices))
	n := 0
	for i, slice := range slices {
		node := slice.Spec.NodeName
		if node == nil || *node == "" || nodes.Has(*node) || countersEverywhere && len(slice.Spec.SharedCounters) > 0 {
			reaching[poolID{slice.Spec.Driver, slice.Spec.Pool.Name}] = struct{}{}
			kept[i] = true
			n++
		}
	}
	result := make([]*resourceapi.ResourceSlice, 0, n)
	for i, slice := range slices {
		if !kept[i] {
			_, kept[i] = reaching[poolID{slice.Spec.Driver, slice.Spec.Pool.Name}]
		}
		if kept[i] {
			result = append(result, slice)
		}
	}
	return result
}

// stableFeatures are the features upstream's stable allocator supports
// (v1.37.2, structured/internal/stable.SupportedFeatures, which is not
// importable): structured.NewAllocator chooses it when the features ask
// for nothing more.
var stableFeatures = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}

// CountersReachEveryNode reports whether the allocator upstream builds for
// these features reads slices with shared counters on every node: its
// stable implementation does (pools_stable.go, GatherPools: "needed to use
// a pool regardless of their node selector") when PartitionableDevices is
// on; the others read only the node's own slices.
func CountersReachEveryNode(features structured.Features) bool {
	return features.PartitionableDevices && stableFeatures.Set().IsSuperset(features.Set())
}
