package nodeprune

import (
	"math/rand/v2"
	"sync"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Index answers what Candidates answers without a pass over every device
// for every pod. It keeps, from the same events the scheduler's claim
// tracker follows, which devices are held, per slice how many of its
// devices are held, and per driver the nodes that reach a node-local slice
// with a free device; a pod's candidates are then read from the nodes of
// its drivers (index_claims.go follows the claims, index_slices.go the
// slices).
//
// The index is a second view of what upstream's tracker knows, fed by its
// own informer handler, so it may be a few events ahead of or behind the
// in-use set upstream's PreFilter gathered for the cycle. It never prunes
// on its own word: before it leaves a node out, it checks that its in-use
// set is that cycle's, by size and by a seeded sum of the devices' hashes
// (equal sums of different sets of device IDs are 64-bit collisions of a
// hash whose seed is the process's own and whose inputs no user chooses).
// The check is one pass over the in-use set's entries without lookups,
// cheaper than the copy upstream's tracker makes of the same set each
// cycle. When the check fails, Candidates' walk answers instead and the
// fallback is counted. When the index finds that every node qualifies,
// nothing is pruned and nothing needs checking.
//
// Claims count as the claim tracker counts them (index_claims.go), and
// slices are the cycle's own listing. Slices not bound to one node (all
// nodes, a node selector, per-device node selection) are few and walked
// each cycle, as Candidates walks them.
type Index struct {
	sharesApart bool
	seed        uint64
	observe     func(Outcome)

	mu sync.Mutex
	// claims mirror the scheduler's assume cache, by namespace/name.
	claims map[string]*claimEntry
	// allocated are the devices of the claims' counted versions, kept as
	// upstream's allocatedDevices keeps them: a set, added to when a
	// version gains an allocation and removed from when one loses it.
	allocated sets.Set[structured.DeviceID]
	// pending are the in-flight allocations by claim UID, and pendingOn
	// counts them per device.
	pending   map[types.UID][]structured.DeviceID
	pendingOn map[structured.DeviceID]int
	// sum and held: the hashes' sum and the number of the devices held
	// (allocated or pending).
	sum, held uint64
	// slices by object (slice UID and resource version: a copy the
	// allocator is handed, reordered by BestFit or patched by a taint
	// rule, is the same slice here); byDevice's entries point back at
	// the slices that list a device, once per listing.
	slices map[sliceKey]*sliceEntry
	// byObject finds a slice by the object last listed for it: a pointer
	// is cheaper to look up than a UID and a version.
	byObject map[*resourceapi.ResourceSlice]*sliceEntry
	byDevice map[structured.DeviceID][]*sliceEntry
	// freeOn: per driver and node, the node-local slices with a free
	// device.
	freeOn map[string]map[string]int
	walked sets.Set[*sliceEntry]
	pass   uint64
}

// Outcome is how the index answered a pod's pruning.
type Outcome string

const (
	// Everywhere: the index found every node qualifies; nothing pruned.
	Everywhere Outcome = "Everywhere"
	// Indexed: the index's in-use set was the cycle's, and it pruned.
	Indexed Outcome = "Indexed"
	// Fallback: the index's in-use set was not the cycle's (events not
	// yet delivered to one of the two views); the walk answered.
	Fallback Outcome = "Fallback"
)

// IndexOptions configure an Index.
type IndexOptions struct {
	// SharesApart: the allocator tracks shared allocations apart from
	// the devices in use (DRAConsumableCapacity).
	SharesApart bool
	// Observe, when set, is told how each pod's pruning was answered.
	Observe func(Outcome)
}

// NewIndex returns an empty index.
func NewIndex(opts IndexOptions) *Index {
	return &Index{
		sharesApart: opts.SharesApart,
		seed:        rand.Uint64(),
		observe:     opts.Observe,
		claims:      map[string]*claimEntry{},
		allocated:   sets.New[structured.DeviceID](),
		pending:     map[types.UID][]structured.DeviceID{},
		pendingOn:   map[structured.DeviceID]int{},
		slices:      map[sliceKey]*sliceEntry{},
		byObject:    map[*resourceapi.ResourceSlice]*sliceEntry{},
		byDevice:    map[structured.DeviceID][]*sliceEntry{},
		freeOn:      map[string]map[string]int{},
		walked:      sets.New[*sliceEntry](),
	}
}

// hash is a seeded hash of a device ID: the addresses of its three
// interned names, each folded in by a round of splitmix64's finalizer,
// the first with the index's seed. An interned name is one allocation per
// distinct string for as long as a handle to it lives (the index holds the
// handles of what it summed, the in-use set those it holds), so equal IDs
// hash equal; no name's bytes are read (maphash over the ID's bytes cost
// 30 ns a device, half of a 2000-node check).
func (x *Index) hash(id structured.DeviceID) uint64 {
	return mix(mix(mix(x.seed^address(id.Driver.String()))^address(id.Pool.String())) ^ address(id.Device.String()))
}

func address(s string) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.StringData(s)))) }

// mix is splitmix64's finalizer: every bit of the input reaches every bit
// of the output.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Nodes is how Index.Candidates learns of the cycle's nodes without a pass
// over them: their number, whether one is among them, and, only when a
// walked slice selects nodes by label, the list.
type Nodes struct {
	Count int
	Has   func(name string) bool
	List  func() []*v1.Node
}

// Candidates answers as Candidates(claims, classes, view, nodes.List())
// does, from the index where its in-use set is the view's. view.Kept are
// the devices the view holds for no claim (release holds and withheld
// ones), view.Withheld among them.
func (x *Index) Candidates(claims []*resourceapi.ResourceClaim, classes ClassGetter, view View, nodes Nodes) (names sets.Set[string], all bool) {
	needs, ok := needsOf(claims, classes)
	if !ok || len(needs) == 0 || len(needs) > maxNeeds {
		return nil, true
	}
	names, all, exact := x.indexed(needs, view, nodes)
	switch {
	case all:
		x.observed(Everywhere)
	case exact:
		x.observed(Indexed)
	default:
		x.observed(Fallback)
		return Candidates(claims, classes, view, nodes.List())
	}
	return names, all
}

func (x *Index) observed(o Outcome) {
	if x.observe != nil {
		x.observe(o)
	}
}

// indexed reads the candidates from the index; exact is false when its
// in-use set is not the view's.
func (x *Index) indexed(needs []need, view View, nodes Nodes) (names sets.Set[string], all, exact bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.syncSlicesLocked(view.Slices)

	full := uint64(1)<<len(needs) - 1
	if len(needs) == maxNeeds {
		full = ^uint64(0)
	}
	met, everywhere := x.walkLocked(needs, view, nodes)
	if everywhere == full {
		return nil, true, true
	}

	adjustOn := x.keptLocked(view)
	reached := make([]driverNodes, len(needs))
	for i, n := range needs {
		reached[i] = x.driverNodesLocked(n, adjustOn)
	}
	qualifies := func(node string, skip int) bool {
		bits := met[node] | everywhere
		for i := range needs {
			if i != skip && bits&(1<<i) == 0 && !reached[i].reach(node) {
				return false
			}
		}
		return true
	}

	// Enumerate the nodes that reach a free device for the first need
	// not met everywhere, and keep those that meet every other need.
	// Count first: on a cluster that is not full every node qualifies,
	// and then no set of names is needed.
	first := 0
	for everywhere&(1<<first) != 0 {
		first++
	}
	each := func(visit func(node string)) {
		reached[first].each(visit)
		for node, bits := range met {
			if bits&(1<<first) != 0 {
				visit(node)
			}
		}
	}
	// From one source, each node comes once.
	once := len(reached[first].free) == 1 && adjustOn == nil && len(met) == 0
	qualify := 0
	names = sets.New[string]()
	each(func(node string) {
		if !nodes.Has(node) || !qualifies(node, first) {
			return
		}
		if once {
			qualify++
		} else {
			names.Insert(node)
		}
	})
	if once {
		if qualify == nodes.Count {
			return nil, true, true
		}
		each(func(node string) {
			if nodes.Has(node) && qualifies(node, first) {
				names.Insert(node)
			}
		})
	}
	if names.Len() == nodes.Count {
		return nil, true, true
	}

	// Pruning: only on the cycle's own in-use set.
	exact = x.sameInUseLocked(view)
	if !exact && view.InFlight != nil {
		x.forgetPendingLocked(view.InFlight)
	}
	return names, false, exact
}

// walkLocked walks the slices not bound to one node, exactly as
// Candidates walks them: the needs their free devices meet on each node
// they name or select, and everywhere.
func (x *Index) walkLocked(needs []need, view View, nodes Nodes) (met map[string]uint64, everywhere uint64) {
	met = map[string]uint64{}
	var list []*v1.Node
	for e := range x.walked {
		sliceMeets := meets(needs, e.slice.Spec.Driver)
		if sliceMeets == 0 {
			continue
		}
		if list == nil {
			list = nodes.List()
		}
		reachFree(met, &everywhere, list, e.slice, e.ids, view, sliceMeets)
	}
	return met, everywhere
}

// keptLocked is how what the view holds for no claim changes this cycle's
// free node-local slices, per driver and node: a held device is in use, a
// withheld one counts free (Filter explains it). Kept devices are few.
func (x *Index) keptLocked(view View) map[string]map[string]int {
	adjust := map[*sliceEntry]int{}
	for id := range view.Kept {
		effective := 0
		if !view.Withheld.Has(id) {
			effective = 1
		}
		base := 0
		if x.isHeld(id) {
			base = 1
		}
		if effective != base {
			for _, e := range x.byDevice[id] {
				adjust[e] += effective - base
			}
		}
	}
	var adjustOn map[string]map[string]int
	for e, delta := range adjust {
		if e.node == "" {
			continue
		}
		wasFree, isFree := e.free(), e.used+delta < len(e.ids)
		if wasFree == isFree {
			continue
		}
		if adjustOn == nil {
			adjustOn = map[string]map[string]int{}
		}
		driver := e.slice.Spec.Driver
		if adjustOn[driver] == nil {
			adjustOn[driver] = map[string]int{}
		}
		if isFree {
			adjustOn[driver][e.node]++
		} else {
			adjustOn[driver][e.node]--
		}
	}
	return adjustOn
}

// driverNodes are, for one need, the nodes of each driver it accepts with
// their free node-local slices, and this cycle's change to those counts.
type driverNodes struct {
	free, adjust []map[string]int
}

func (x *Index) driverNodesLocked(n need, adjustOn map[string]map[string]int) driverNodes {
	var d driverNodes
	for driver, on := range x.freeOn {
		if n.accepts(driver) {
			d.free = append(d.free, on)
			d.adjust = append(d.adjust, adjustOn[driver])
		}
	}
	for driver, on := range adjustOn {
		if _, listed := x.freeOn[driver]; !listed && n.accepts(driver) {
			d.free = append(d.free, nil)
			d.adjust = append(d.adjust, on)
		}
	}
	return d
}

// reach reports whether the node reaches a free device of the need.
func (d driverNodes) reach(node string) bool {
	for i, free := range d.free {
		if free[node]+d.adjust[i][node] > 0 {
			return true
		}
	}
	return false
}

// each visits the nodes that reach a free device of the need; a node
// free for several drivers is visited for each.
func (d driverNodes) each(visit func(node string)) {
	for i, free := range d.free {
		for node, count := range free {
			if count+d.adjust[i][node] > 0 {
				visit(node)
			}
		}
		for node, delta := range d.adjust[i] {
			if free[node] == 0 && delta > 0 {
				visit(node)
			}
		}
	}
}

// sameInUseLocked reports whether the view's in-use set is the index's
// held devices and the view's kept ones.
func (x *Index) sameInUseLocked(view View) bool {
	size, sum := x.held, x.sum
	for id := range view.Kept {
		if !x.isHeld(id) {
			size++
			sum += x.hash(id)
		}
	}
	if uint64(view.InUse.Len()) != size {
		return false
	}
	var got uint64
	for id := range view.InUse {
		got += x.hash(id)
	}
	return got == sum
}

// Sizes returns how many entries the index's maps that follow claims hold.
// Its slices are the last pruning cycle's, however many the cluster has.
func (x *Index) Sizes() map[string]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return map[string]int{
		"nodeprune_claims":       len(x.claims),
		"nodeprune_pending":      len(x.pending),
		"nodeprune_allocated":    x.allocated.Len(),
		"nodeprune_pending_held": len(x.pendingOn),
	}
}
