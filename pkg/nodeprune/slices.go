package nodeprune

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// PoolsReaching returns, in their order, the slices of every pool that has
// a slice on one of nodes or a slice not bound to one node (a node
// selector, all nodes, devices that each select nodes): everything
// upstream's allocator reads when it allocates on one of those nodes. In
// v1.37.1 each of its three implementations (structured/internal) gathers,
// for a node, the slices with that node's name and the slices not bound to
// one node, and only when those leave a pool incomplete does it look at the
// pool's other slices (checkSlicesInPool) for its generation and count; so
// a pool is kept whole. An allocator built from the result answers as one
// built from every slice, on each of nodes.
func PoolsReaching(slices []*resourceapi.ResourceSlice, nodes sets.Set[string]) []*resourceapi.ResourceSlice {
	type poolID struct{ driver, pool string }
	reaching := map[poolID]struct{}{}
	kept := make([]bool, len(slices))
	n := 0
	for i, slice := range slices {
		if node := slice.Spec.NodeName; node == nil || *node == "" || nodes.Has(*node) {
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
