// Package filtermemo remembers which nodes upstream's DynamicResources
// Filter accepted, with everything its allocator read for each, so that
// the next pod of the same claim shape is accepted on those nodes without
// running the allocator while nothing it reads has changed. It knows
// nothing of the scheduler framework: the DRAScope plugin sets a Cycle up
// in PreFilter, asks it in Filter and checks its answers in Reserve.
package filtermemo

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	draapi "k8s.io/dynamic-resource-allocation/api"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Memo remembers the nodes upstream's Filter accepted, with what its
// allocator read for each: on a cluster that is not full, nearly every node
// accepts the pod, upstream's Filter runs its allocator on each of them
// (about half of the scheduler's CPU at 500 nodes: docs/perf.md), and from
// one pod to the next only the node the last pod went to has changed.
//
// Upstream's allocator, asked about one node, reads only: the claims'
// specs, their device classes, the node, the slices of the pools that
// reach the node, and the devices in use in those pools. Its answer is a
// function of these. A node it accepted for a claim shape is accepted
// again, without running it, when all of them are what they were: the same
// claim specs, the same class, node and slice objects (informer objects are
// never changed in place: a change is a new object; the memo holds the ones
// it compares, so an address is never reused under it), and the same
// devices in use in those pools (a 64-bit hash of the set: a release and an
// allocation change it unless two devices' hashes collide).
//
// A pool is the node's own when every slice of it names that node; every
// other pool (a node selector, all nodes, per-device node selection, slices
// on several nodes, and, where the allocator reads them on every node,
// slices with shared counters) may reach any node, and counts for all.
//
// Only acceptances are remembered (a refusal's message and retry hints come
// from running Filter), and only for claims that ask for devices by class
// only (NewCycle; upstream's Score reads Filter's result for prioritized
// lists). Which cycles the memo may serve at all is the plugin's to say
// (pkg/plugins/drascope, prefilter.go: every claim to allocate, every node
// kept, no gang steering or plan, no node-allocatable resources, no
// what-if that changed anything). Upstream's Reserve needs its Filter's
// result for the chosen node, so the plugin's Reserve runs upstream's
// Filter there first when the memo answered for it (AnsweredFor); were it
// to refuse, the memo forgets everything (Forget).
type Memo struct {
	mu sync.RWMutex
	// shapes are the accepted nodes by claim shape, the most recently
	// scheduled last.
	shapes []*shapeMemo
	// cycles counts the cycles set up, for the sweep of departed nodes.
	cycles int

	// deviceHashes caches each in-use device's hash, and layout the last
	// listing's layout, for the next cycles (PreFilter's, one cycle at a
	// time). The hashes' keys hold their names' handles, so a key is never
	// another name's.
	cacheMu      sync.Mutex
	deviceHashes map[structured.DeviceID]deviceHash
	layout       *Layout
	layouts      uint64
	// HashFromListing, for tests, hashes from the listing whenever the
	// candidates are known, whatever it costs.
	HashFromListing bool
}

// deviceHash is a device's hash and where it counts in one layout: one
// map access per device in use per cycle (tens of thousands at 2000
// nodes) is what the memo's set-up costs.
type deviceHash struct {
	sum uint64
	// layout is the generation of the layout bucket is of.
	layout uint64
	bucket int32
}

// Layout is which slices and pools reach which node, for one set of
// listed slices: the same from one cycle to the next until a slice changes
// or, where pruning serves a part of them, the part does.
type Layout struct {
	// slices are the listed slices (a listing holds each slice once: the
	// informer's list, pruning's pools, BestFit's order and the counters'
	// copies each keep one per slice, so equal sizes and membership make
	// the same set); countersReachEveryNode is the allocator's flag it
	// was laid out with.
	slices                 map[*resourceapi.ResourceSlice]struct{}
	countersReachEveryNode bool
	// nodes index local: each node's own slices, by name.
	nodes map[string]int
	local [][]*resourceapi.ResourceSlice
	// global are the slices of the pools that may reach any node, by
	// name, and globalPools those pools.
	global      []*resourceapi.ResourceSlice
	globalPools []memoPool
	// generation tells layouts apart in the device hashes' cache;
	// buckets are where a pool's devices count in hashInUse: node n's
	// own pools in n, the pools that may reach any node after the last
	// node.
	generation uint64
	buckets    map[memoPool]int32
	// devices counts the devices listed in each bucket, and listed holds
	// them, each once, with their hashes, made when a cycle first hashes
	// the bucket from its listing (hashInUse).
	devices []int
	listed  [][]listedDevice
}

// listedDevice is a device listed in a bucket's slices, with its hash.
type listedDevice struct {
	id  structured.DeviceID
	sum uint64
}

// slicesOf are the slices of bucket b.
func (l *Layout) slicesOf(b int) []*resourceapi.ResourceSlice {
	if b == len(l.local) {
		return l.global
	}
	return l.local[b]
}

// Reaching returns the slices of the pools that may reach any node and
// those of the candidates' own pools.
func (l *Layout) Reaching(candidates sets.Set[string]) []*resourceapi.ResourceSlice {
	n := len(l.global)
	for name := range candidates {
		if b, ok := l.nodes[name]; ok {
			n += len(l.local[b])
		}
	}
	result := make([]*resourceapi.ResourceSlice, 0, n)
	result = append(result, l.global...)
	for name := range candidates {
		if b, ok := l.nodes[name]; ok {
			result = append(result, l.local[b]...)
		}
	}
	return result
}

// listedIn returns the devices listed in bucket b, each once: a device
// listed twice (a malformed pool) would cancel out of the XOR.
func (l *Layout) listedIn(b int) []listedDevice {
	if l.listed[b] != nil {
		return l.listed[b]
	}
	listed := make([]listedDevice, 0, l.devices[b])
	seen := make(sets.Set[structured.DeviceID], l.devices[b])
	for _, slice := range l.slicesOf(b) {
		driver, pool := draapi.MakeUniqueString(slice.Spec.Driver), draapi.MakeUniqueString(slice.Spec.Pool.Name)
		for i := range slice.Spec.Devices {
			name := slice.Spec.Devices[i].Name
			id := structured.DeviceID{Driver: driver, Pool: pool, Device: draapi.MakeUniqueString(name)}
			if seen.Has(id) {
				continue
			}
			seen.Insert(id)
			listed = append(listed, listedDevice{id: id, sum: hashNames(slice.Spec.Driver, slice.Spec.Pool.Name, name)})
		}
	}
	l.listed[b] = listed
	return listed
}

// bucketOf is where pool's devices count, or -1 for a pool no listed
// slice is of.
func (l *Layout) bucketOf(pool memoPool) int32 {
	if b, ok := l.buckets[pool]; ok {
		return b
	}
	return -1
}

// NewCycle sets the memo up for one scheduling cycle, or returns nil when
// it cannot answer for the claims (a request with alternatives, a spec it
// cannot encode). classOf looks a device class up as the allocator does;
// layout returns LayoutOf the slices upstream's allocator was built from
// this cycle, asked for only when the memo can answer for the claims; nodes returns the scheduler's nodes by name, asked for only now
// and then, to drop what departed nodes left; state is the in-use state
// the allocator was built from; candidates are the nodes Filter will see,
// nil for every node: the memo answers for those only.
func (m *Memo) NewCycle(claims []*resourceapi.ResourceClaim, classOf func(name string) (*resourceapi.DeviceClass, error), layoutOf func() *Layout, nodes func() map[string]*v1.Node, state structured.AllocatedState, candidates sets.Set[string]) *Cycle {
	var shape []byte
	var classNames []string
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly == nil {
				return nil
			}
			classNames = append(classNames, request.Exactly.DeviceClassName)
		}
		spec, err := claim.Spec.Marshal()
		if err != nil {
			return nil
		}
		// Length-prefixed: a spec's bytes may hold any byte.
		shape = binary.AppendUvarint(shape, uint64(len(spec)))
		shape = append(shape, spec...)
	}
	layout := layoutOf()
	c := &Cycle{memo: m, shape: string(shape), classNames: classNames, classOf: classOf, layout: layout}
	m.touch(c.shape, layout, nodes)
	c.inUse = m.hashInUse(state, layout, candidates)
	return c
}

// memoShapes bounds the claim shapes remembered: a cluster schedules a
// handful of templates at a time.
const memoShapes = 8

// memoSweepEvery is how many cycles pass between sweeps of the entries of
// nodes that are gone or changed.
const memoSweepEvery = 1024

type shapeMemo struct {
	key   string
	nodes map[string]memoEntry
}

// memoEntry is what the allocator read when upstream's Filter accepted the
// node.
type memoEntry struct {
	node    *v1.Node
	classes []*resourceapi.DeviceClass
	local   []*resourceapi.ResourceSlice
	global  []*resourceapi.ResourceSlice
	inUse   uint64
}

// Cycle is one cycle's side of the memo: what its allocator reads, by
// node. It is written once in PreFilter and read by Filter's goroutines.
type Cycle struct {
	memo  *Memo
	shape string
	// classNames are the claims' classes, which classOf looks up now: the
	// allocator looks them up for each node.
	classNames []string
	classOf    func(name string) (*resourceapi.DeviceClass, error)
	// layout is which slices reach which node; inUse hashes the devices
	// in use by its buckets.
	layout *Layout
	inUse  bucketHashes

	mu sync.Mutex
	// answered are the nodes the memo accepted this cycle.
	answered sets.Set[string]
}

// memoPool is a pool by its interned names, as the in-use set holds them.
type memoPool struct{ driver, pool draapi.UniqueString }

func poolOf(slice *resourceapi.ResourceSlice) memoPool {
	return memoPool{draapi.MakeUniqueString(slice.Spec.Driver), draapi.MakeUniqueString(slice.Spec.Pool.Name)}
}

var memoSeed = maphash.MakeSeed()

// LayoutOf returns the layout of the listed slices: the last one's when
// they are the same slices. A pool is a node's own when each of its slices
// names that node (and, where the allocator reads slices with shared
// counters on every node, none has them); every other pool may reach any
// node.
func (m *Memo) LayoutOf(listed []*resourceapi.ResourceSlice, countersReachEveryNode bool) *Layout {
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if l := m.layout; l != nil && l.countersReachEveryNode == countersReachEveryNode && len(l.slices) == len(listed) && !slices.ContainsFunc(listed, func(slice *resourceapi.ResourceSlice) bool {
		_, ok := l.slices[slice]
		return !ok
	}) {
		return l
	}
	l := &Layout{slices: make(map[*resourceapi.ResourceSlice]struct{}, len(listed)), countersReachEveryNode: countersReachEveryNode, nodes: map[string]int{}}
	owner := map[memoPool]string{}
	pools := make([]memoPool, len(listed))
	for i, slice := range listed {
		l.slices[slice] = struct{}{}
		pool, node := poolOf(slice), ""
		if slice.Spec.NodeName != nil && !(countersReachEveryNode && len(slice.Spec.SharedCounters) > 0) {
			node = *slice.Spec.NodeName
		}
		if was, ok := owner[pool]; ok && was != node {
			node = ""
		}
		owner[pool], pools[i] = node, pool
	}
	for i, slice := range listed {
		node := owner[pools[i]]
		if node == "" {
			l.global = append(l.global, slice)
			continue
		}
		n, ok := l.nodes[node]
		if !ok {
			n = len(l.local)
			l.nodes[node] = n
			l.local = append(l.local, nil)
		}
		l.local[n] = append(l.local[n], slice)
	}
	l.buckets = make(map[memoPool]int32, len(owner))
	for pool, node := range owner {
		if n, ok := l.nodes[node]; ok {
			l.buckets[pool] = int32(n)
			continue
		}
		l.globalPools = append(l.globalPools, pool)
		l.buckets[pool] = int32(len(l.local))
	}
	l.devices = make([]int, len(l.local)+1)
	l.listed = make([][]listedDevice, len(l.local)+1)
	for b := range l.devices {
		for _, slice := range l.slicesOf(b) {
			l.devices[b] += len(slice.Spec.Devices)
		}
	}
	m.layouts++
	l.generation = m.layouts
	// The listing's order is a map's; the allocator sorts slices by name.
	byName := func(a, b *resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(l.global, byName)
	for _, local := range l.local {
		slices.SortFunc(local, byName)
	}
	m.layout = l
	return l
}

// touch keeps the cycle's claim shape among the most recent, and now and
// then drops the entries that could not be accepted again and only hold
// old objects: those of nodes that are gone or whose object changed, and
// those whose slices are not the current layout's (a node pruning leaves
// out loses its entries too, at worst one miss each).
func (m *Memo) touch(key string, layout *Layout, nodes func() map[string]*v1.Node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.IndexFunc(m.shapes, func(shape *shapeMemo) bool { return shape.key == key }); i >= 0 && i < len(m.shapes)-1 {
		shape := m.shapes[i]
		m.shapes = append(slices.Delete(m.shapes, i, i+1), shape)
	}
	if m.cycles++; m.cycles%memoSweepEvery != 0 {
		return
	}
	current := nodes()
	for _, shape := range m.shapes {
		for name, entry := range shape.nodes {
			var local []*resourceapi.ResourceSlice
			if n, ok := layout.nodes[name]; ok {
				local = layout.local[n]
			}
			if current[name] != entry.node || !slices.Equal(entry.local, local) || !slices.Equal(entry.global, layout.global) {
				delete(shape.nodes, name)
			}
		}
	}
}

// bucketHashes hash the devices in use by a layout's buckets: local by
// node index, global for the pools that may reach any node. known says
// which local buckets were hashed, nil when all were.
type bucketHashes struct {
	local  []uint64
	known  []bool
	global uint64
}

// hashInUse hashes the devices in use, the shares in use and the capacity
// consumed, by the layout's buckets (each node's own pools, and the pools
// that may reach any node): the XOR of one hash per element, so that the
// order of the sets does not matter. With candidates (nil: every node) it
// hashes only their buckets and the pools that reach any node, from
// whichever side is shorter: every device in use, looked up by pool, or the
// devices listed in those buckets, looked up in the in-use set. On a
// nearly full cluster pruning leaves a few nodes, whose devices are a
// tenth of those in use or less; on an empty one, few devices are in use.
// Both sides give a bucket the same hash for the listed devices; a device
// in use that no slice lists counts only from the in-use side, and the
// allocator never reads it.
func (m *Memo) hashInUse(state structured.AllocatedState, l *Layout, candidates sets.Set[string]) bucketHashes {
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	buckets := make([]uint64, len(l.local)+1)
	var known []bool
	most := len(state.AllocatedDevices)
	if m.HashFromListing {
		most = math.MaxInt
	}
	if hashed, ok := l.candidateBuckets(candidates, most); ok {
		known = make([]bool, len(l.local))
		for _, b := range append(hashed, len(l.local)) {
			if b < len(known) {
				known[b] = true
			}
			for _, device := range l.listedIn(b) {
				if state.AllocatedDevices.Has(device.id) {
					buckets[b] ^= device.sum
				}
			}
		}
	} else {
		m.hashEveryInUse(state.AllocatedDevices, l, buckets)
	}
	add := func(pool memoPool, sum uint64) {
		if b := l.bucketOf(pool); b >= 0 {
			buckets[b] ^= sum
		}
	}
	for id := range state.AllocatedSharedDeviceIDs {
		add(memoPool{id.Driver, id.Pool}, hashNames(id.Driver.String(), id.Pool.String(), id.Device.String(), "share", id.ShareID.String()))
	}
	// Quantity.String caches its text in the quantity: this runs in
	// PreFilter, before Filter's goroutines read the same state.
	for id, consumed := range state.AggregatedCapacity {
		for name, quantity := range consumed {
			add(memoPool{id.Driver, id.Pool}, hashNames(id.Driver.String(), id.Pool.String(), id.Device.String(), "capacity", string(name), quantity.String()))
		}
	}
	return bucketHashes{local: buckets[:len(l.local)], known: known, global: buckets[len(l.local)]}
}

// candidateBuckets returns the local buckets of the candidates, when
// hashing them and the pools that reach any node from their listing looks
// up fewer devices than most, the devices in use.
func (l *Layout) candidateBuckets(candidates sets.Set[string], most int) ([]int, bool) {
	if candidates == nil {
		return nil, false
	}
	cost := l.devices[len(l.local)]
	var hashed []int
	for name := range candidates {
		if cost >= most {
			return nil, false
		}
		if b, ok := l.nodes[name]; ok {
			hashed = append(hashed, b)
			cost += l.devices[b]
		}
	}
	// The pools that reach any node alone may list more devices than are
	// in use (few candidates, or none that the layout knows).
	return hashed, cost < most
}

// hashEveryInUse adds every device in inUse to its pool's bucket, with one
// map access per device for its hash and bucket in the layout.
func (m *Memo) hashEveryInUse(inUse sets.Set[structured.DeviceID], l *Layout, buckets []uint64) {
	if m.deviceHashes == nil || len(m.deviceHashes) > 2*len(inUse)+1024 {
		// Devices no longer in use go, now and then.
		m.deviceHashes = make(map[structured.DeviceID]deviceHash, len(inUse))
	}
	for id := range inUse {
		h, ok := m.deviceHashes[id]
		if !ok || h.layout != l.generation {
			if !ok {
				h.sum = hashNames(id.Driver.String(), id.Pool.String(), id.Device.String())
			}
			h.layout, h.bucket = l.generation, l.bucketOf(memoPool{id.Driver, id.Pool})
			m.deviceHashes[id] = h
		}
		if h.bucket >= 0 {
			buckets[h.bucket] ^= h.sum
		}
	}
}

// hashNames is a seeded 64-bit hash of names. Not the index's hash of a
// device ID (nodeprune), which hashes the interned names' addresses: that
// holds within one cycle, while the memo compares hashes across cycles,
// over which a name no longer in use may be freed and its address given
// to another.
func hashNames(names ...string) uint64 {
	var h maphash.Hash
	h.SetSeed(memoSeed)
	for _, name := range names {
		h.WriteString(name)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// Classes are the claims' classes now.
func (c *Cycle) Classes() ([]*resourceapi.DeviceClass, bool) {
	classes := make([]*resourceapi.DeviceClass, 0, len(c.classNames))
	for _, name := range c.classNames {
		class, err := c.classOf(name)
		if err != nil {
			return nil, false
		}
		classes = append(classes, class)
	}
	return classes, true
}

// ClassesAre reports whether the claims' classes are these now, without
// the copy classes makes: it runs for every node the memo answers.
func (c *Cycle) ClassesAre(want []*resourceapi.DeviceClass) bool {
	if len(want) != len(c.classNames) {
		return false
	}
	for i, name := range c.classNames {
		if class, err := c.classOf(name); err != nil || class != want[i] {
			return false
		}
	}
	return true
}

// entryFor is what this cycle's allocator reads for node, with classes.
func (c *Cycle) entryFor(node *v1.Node, classes []*resourceapi.DeviceClass) memoEntry {
	entry := memoEntry{node: node, classes: classes, global: c.layout.global, inUse: c.inUse.global}
	if n, ok := c.layout.nodes[node.Name]; ok {
		entry.local = c.layout.local[n]
		entry.inUse ^= c.inUse.local[n]
	}
	return entry
}

// hashed reports whether the devices in use in the node's own pools were
// hashed this cycle: the memo answers for no other node.
func (c *Cycle) hashed(node string) bool {
	n, ok := c.layout.nodes[node]
	return !ok || c.inUse.known == nil || c.inUse.known[n]
}

// Accepts reports whether upstream's Filter accepted the node before, with
// what this cycle's allocator reads for it and the classes as they are now.
func (c *Cycle) Accepts(node *v1.Node) bool {
	if !c.hashed(node.Name) {
		return false
	}
	c.memo.mu.RLock()
	shape := c.memo.shape(c.shape)
	var was memoEntry
	var ok bool
	if shape != nil {
		was, ok = shape.nodes[node.Name]
	}
	c.memo.mu.RUnlock()
	if !ok || !was.equal(c.entryFor(node, nil)) || !c.ClassesAre(was.classes) {
		return false
	}
	c.mu.Lock()
	if c.answered == nil {
		c.answered = sets.New[string]()
	}
	c.answered.Insert(node.Name)
	c.mu.Unlock()
	return true
}

// Accepted remembers that upstream's Filter accepted the node this cycle,
// with classes.
func (c *Cycle) Accepted(node *v1.Node, classes []*resourceapi.DeviceClass) {
	if !c.hashed(node.Name) {
		return
	}
	entry := c.entryFor(node, classes)
	c.memo.mu.Lock()
	defer c.memo.mu.Unlock()
	shape := c.memo.shape(c.shape)
	if shape == nil {
		shape = &shapeMemo{key: c.shape, nodes: map[string]memoEntry{}}
		if len(c.memo.shapes) == memoShapes {
			c.memo.shapes = slices.Delete(c.memo.shapes, 0, 1)
		}
		c.memo.shapes = append(c.memo.shapes, shape)
	}
	shape.nodes[node.Name] = entry
}

// Answered counts the nodes the memo accepted this cycle.
func (c *Cycle) Answered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered.Len()
}

// HashedFromListing reports whether the cycle hashed the devices in use
// from the candidates' listed devices (only their nodes' pools and those
// that reach any node) rather than from every device in use.
func (c *Cycle) HashedFromListing() bool { return c.inUse.known != nil }

// Forget drops everything the cycle's memo remembers (Memo.Forget).
func (c *Cycle) Forget() { c.memo.Forget() }

// AnsweredFor reports whether the memo accepted the node this cycle.
func (c *Cycle) AnsweredFor(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered.Has(node)
}

// Forget drops everything the memo remembers: an acceptance upstream's
// Filter refuted means an input the memo does not compare, which may be
// behind other entries too.
func (m *Memo) Forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shapes = nil
}

// shape is the memo of a claim shape, or nil; the caller holds mu.
func (m *Memo) shape(key string) *shapeMemo {
	for _, shape := range m.shapes {
		if shape.key == key {
			return shape
		}
	}
	return nil
}

// equal compares what the allocator reads but the classes, which accepts
// looks up afresh (ClassesAre).
func (e memoEntry) equal(o memoEntry) bool {
	return e.node == o.node && e.inUse == o.inUse && slices.Equal(e.local, o.local) && slices.Equal(e.global, o.global)
}
