// Package devicechoice orders the devices of a pool so that upstream's
// first-fit allocator chooses well among the devices it may use
// (deviceChoice: BestFit). It never adds or removes a device: ordering
// only, so the allocator decides what is allowed exactly as before.
//
// Where ordering works (v1.37.2): the default allocator (incubating, and
// the experimental one) sorts pools by driver and name and slices by name,
// but keeps the order of the devices inside a slice, and each request's
// search starts from the first device. So Order reorders Spec.Devices
// within each slice, in copies; the order of slices and pools is upstream's.
//
// Two keys, in this order:
//   - Partitions pack: a device drawing on shared counter sets (KEP-4815
//     partitionable devices) that are already partly consumed comes first,
//     the most consumed first, then devices of untouched sets, then those of
//     sets that are used up. Small partitions then fill one physical device
//     before touching the next, and whole devices stay whole.
//   - Topology groups: devices sharing a value of a topology attribute
//     (resource.kubernetes.io/pcieRoot by default) are contiguous, the group
//     that best fits the pod's device count first (the fewest free devices
//     that still hold the count), so that a pod asking for several devices
//     without matchAttribute gets them under one root where one has room.
//     The order is fixed before the search, so this is an approximation of
//     "next to what the pod already got"; matchAttribute still requires it.
package devicechoice

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/slicememo"
)

// DefaultTopologyAttributes are the standard attributes that group devices
// by where they sit.
var DefaultTopologyAttributes = []resourceapi.QualifiedName{"resource.kubernetes.io/pcieRoot"}

// Options say how to order.
type Options struct {
	// InUse reports whether a device is allocated (or held, or withheld):
	// the allocator's in-use set of the cycle.
	InUse func(structured.DeviceID) bool
	// Want is how many devices the pod asks for in all; groups are ranked
	// by how well they fit it. Zero or one: the fullest group that has a
	// free device first.
	Want int
	// TopologyAttributes name the attributes that group devices; the first
	// one a device has is its group. Nil: DefaultTopologyAttributes.
	TopologyAttributes []resourceapi.QualifiedName
	// Orderable, when set, remembers across calls which slices have
	// anything to order by, so that a cluster of plain devices costs a map
	// lookup per slice and cycle rather than a look at every device. Calls
	// that share it must have the same TopologyAttributes.
	Orderable *slicememo.Memo[bool]
}

// withDefaults fills in what the caller left unset: nothing in use, the
// default topology attributes.
func (o Options) withDefaults() Options {
	if o.InUse == nil {
		o.InUse = func(structured.DeviceID) bool { return false }
	}
	if o.TopologyAttributes == nil {
		o.TopologyAttributes = DefaultTopologyAttributes
	}
	return o
}

// Order returns the pool's slices with each slice's devices in BestFit
// order. A slice whose order does not change is returned as it is; one
// that changes is a copy (informer objects are never written). The slices
// must be those of one pool's current generation: counter sets are the
// pool's.
func Order(pool []*resourceapi.ResourceSlice, opts Options) []*resourceapi.ResourceSlice {
	opts = opts.withDefaults()
	use := counterUse(pool, opts.InUse)
	groups := topologyGroups(pool, opts)
	if len(use) == 0 && len(groups) == 0 {
		// Every device ranks alike (no counter set is partly used, no
		// device is in a topology group): the driver's order stays, and
		// no slice needs looking at. The common case of plain devices.
		return pool
	}
	out := make([]*resourceapi.ResourceSlice, len(pool))
	for i, slice := range pool {
		out[i] = orderSlice(slice, use, groups, opts)
	}
	return out
}

// setUse is how far a counter set is consumed: the largest fraction of any
// of its counters.
type setUse map[string]float64

// counterUse sums, per counter set of the pool, what the devices in use
// consume, as a fraction of the set's counters.
func counterUse(pool []*resourceapi.ResourceSlice, inUse func(structured.DeviceID) bool) setUse {
	totals := map[string]map[string]resource.Quantity{}
	for _, slice := range pool {
		for _, set := range slice.Spec.SharedCounters {
			counters := map[string]resource.Quantity{}
			for name, c := range set.Counters {
				counters[name] = c.Value
			}
			totals[set.Name] = counters
		}
	}
	consumed := map[string]map[string]resource.Quantity{}
	for _, slice := range pool {
		for i := range slice.Spec.Devices {
			d := &slice.Spec.Devices[i]
			if len(d.ConsumesCounters) == 0 || !inUse(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name)) {
				continue
			}
			for _, c := range d.ConsumesCounters {
				sums := consumed[c.CounterSet]
				if sums == nil {
					sums = map[string]resource.Quantity{}
					consumed[c.CounterSet] = sums
				}
				for name, v := range c.Counters {
					q := sums[name]
					q.Add(v.Value)
					sums[name] = q
				}
			}
		}
	}
	use := setUse{}
	for set, sums := range consumed {
		for name, q := range sums {
			total, ok := totals[set][name]
			if !ok || total.IsZero() {
				continue
			}
			use[set] = max(use[set], q.AsApproximateFloat64()/total.AsApproximateFloat64())
		}
	}
	return use
}

// packRank orders devices by the counter sets they draw on: 0 partly
// consumed sets, 1 untouched sets or no counters, 2 sets used up; within
// rank 0, fill is the largest fraction consumed.
func packRank(d *resourceapi.Device, use setUse) (rank int, fill float64) {
	rank = 1
	for _, c := range d.ConsumesCounters {
		switch f := use[c.CounterSet]; {
		case f >= 1:
			return 2, f
		case f > 0:
			rank, fill = 0, max(fill, f)
		}
	}
	return rank, fill
}

// groupKey names a topology group: an attribute and its value.
type groupKey struct {
	attribute resourceapi.QualifiedName
	value     string
}

// topologyGroups ranks the pool's topology groups: the groups that hold the
// wanted count with the fewest free devices first, then the others with
// the most free devices first; ties by name. Devices without a topology
// attribute are in no group and come after every group.
func topologyGroups(pool []*resourceapi.ResourceSlice, opts Options) map[groupKey]int {
	free := map[groupKey]int{}
	for _, slice := range pool {
		for i := range slice.Spec.Devices {
			d := &slice.Spec.Devices[i]
			key, ok := groupOf(d, opts.TopologyAttributes)
			if !ok {
				continue
			}
			if _, seen := free[key]; !seen {
				free[key] = 0
			}
			if !opts.InUse(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name)) {
				free[key]++
			}
		}
	}
	want := max(opts.Want, 1)
	keys := make([]groupKey, 0, len(free))
	for k := range free {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		fa, fb := free[a] >= want, free[b] >= want
		switch {
		case fa && !fb:
			return -1
		case fb && !fa:
			return 1
		case fa && fb:
			if c := cmp.Compare(free[a], free[b]); c != 0 {
				return c
			}
		default:
			if c := cmp.Compare(free[b], free[a]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.attribute, b.attribute), cmp.Compare(a.value, b.value))
	})
	rank := make(map[groupKey]int, len(keys))
	for i, k := range keys {
		rank[k] = i
	}
	return rank
}

// groupOf is the device's topology group: the first of attrs it has.
func groupOf(d *resourceapi.Device, attrs []resourceapi.QualifiedName) (groupKey, bool) {
	for _, name := range attrs {
		a, ok := d.Attributes[name]
		if !ok {
			continue
		}
		switch {
		case a.StringValue != nil:
			return groupKey{name, *a.StringValue}, true
		case a.IntValue != nil:
			return groupKey{name, resource.NewQuantity(*a.IntValue, resource.DecimalSI).String()}, true
		case a.VersionValue != nil:
			return groupKey{name, *a.VersionValue}, true
		case a.BoolValue != nil:
			if *a.BoolValue {
				return groupKey{name, "true"}, true
			}
			return groupKey{name, "false"}, true
		}
	}
	return groupKey{}, false
}

// orderSlice sorts one slice's devices, stably: pack rank, fill (most
// first), topology group rank (devices in no group last), then the
// driver's order.
func orderSlice(slice *resourceapi.ResourceSlice, use setUse, groups map[groupKey]int, opts Options) *resourceapi.ResourceSlice {
	n := len(slice.Spec.Devices)
	if n < 2 {
		return slice
	}
	type keyed struct {
		index, rank, group int
		fill               float64
	}
	keys := make([]keyed, n)
	for i := range slice.Spec.Devices {
		d := &slice.Spec.Devices[i]
		rank, fill := packRank(d, use)
		group := len(groups)
		if g, ok := groupOf(d, opts.TopologyAttributes); ok {
			group = groups[g]
		}
		keys[i] = keyed{index: i, rank: rank, group: group, fill: fill}
	}
	slices.SortStableFunc(keys, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(b.fill, a.fill), cmp.Compare(a.group, b.group))
	})
	changed := false
	for i, k := range keys {
		if k.index != i {
			changed = true
			break
		}
	}
	if !changed {
		return slice
	}
	// A shallow copy with a list of its own: the allocator only reads
	// slices, so the devices' attributes and capacities can be shared
	// with the informer's object, which nothing writes.
	ordered := *slice
	ordered.Spec.Devices = make([]resourceapi.Device, n)
	for i, k := range keys {
		ordered.Spec.Devices[i] = slice.Spec.Devices[k.index]
	}
	return &ordered
}

// orderable reports whether a slice has anything BestFit orders by:
// counter sets, devices that draw on them, or devices in a topology group.
func orderable(slice *resourceapi.ResourceSlice, attrs []resourceapi.QualifiedName) bool {
	if len(slice.Spec.SharedCounters) > 0 {
		return true
	}
	for i := range slice.Spec.Devices {
		d := &slice.Spec.Devices[i]
		if len(d.ConsumesCounters) > 0 {
			return true
		}
		if _, ok := groupOf(d, attrs); ok {
			return true
		}
	}
	return false
}

// OrderPools is Order for every pool among slices (as a slice lister lists
// them), keeping each slice's position in the list.
func OrderPools(all []*resourceapi.ResourceSlice, opts Options) []*resourceapi.ResourceSlice {
	opts = opts.withDefaults()
	isOrderable := func(slice *resourceapi.ResourceSlice) bool { return orderable(slice, opts.TopologyAttributes) }
	anyOrderable := false
	opts.Orderable.Begin()
	for _, slice := range all {
		// Every slice, not only up to the first orderable one: the memo
		// forgets slices a call does not pass.
		anyOrderable = opts.Orderable.Of(slice, isOrderable) || anyOrderable
	}
	opts.Orderable.End()
	if !anyOrderable {
		// A cluster of plain devices: nothing to order, no pool to group.
		return all
	}
	type poolID struct{ driver, pool string }
	// Only the pool's newest generation is ordered: older slices a lister
	// still returns would count devices twice; they pass through.
	newest := map[poolID]int64{}
	for _, slice := range all {
		id := poolID{slice.Spec.Driver, slice.Spec.Pool.Name}
		newest[id] = max(newest[id], slice.Spec.Pool.Generation)
	}
	byPool := map[poolID][]int{}
	for i, slice := range all {
		id := poolID{slice.Spec.Driver, slice.Spec.Pool.Name}
		if slice.Spec.Pool.Generation == newest[id] {
			byPool[id] = append(byPool[id], i)
		}
	}
	out := slices.Clone(all)
	for _, indexes := range byPool {
		pool := make([]*resourceapi.ResourceSlice, len(indexes))
		for j, i := range indexes {
			pool[j] = all[i]
		}
		for j, ordered := range Order(pool, opts) {
			out[indexes[j]] = ordered
		}
	}
	return out
}
