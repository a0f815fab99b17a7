package drascope

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/metrics"
)

// filterMemo remembers the nodes upstream's Filter accepted, with what its
// allocator read for each: on a cluster that is not full, nearly every node
// accepts the pod, upstream's Filter runs its allocator on each of them
// (about half of the scheduler's CPU at 500 nodes: docs/perf.md), and from
// one pod to the next only the node the last pod went to has changed.
//
// Upstream's allocator, asked about one node, reads only: the claims'
// specs, their device classes, the node, the slices that reach the node
// (its own, and those with a node selector or for all nodes), and the
// devices in use in those slices' pools. Its answer is a function of
// these. A node it accepted for a claim shape is accepted again, without
// running it, when all of them are what they were: the same claim specs,
// the same class, node and slice objects (informer objects are never
// changed in place: a change is a new object; the memo holds the ones it
// compares, so an address is never reused under it), and the same devices
// in use in those pools (a 64-bit hash of the set: a release and an
// allocation change it unless two devices' hashes collide).
//
// Only acceptances are remembered (a refusal's message and retry hints come
// from running Filter), and only for the cycles pruning first set up
// (prunefirst.go: every claim to allocate, no gang, no nomination), whose
// claims ask for devices by class only (upstream's Score reads Filter's
// result for prioritized lists), without node-allocatable resources, and
// outside preemption's dry runs (the what-if state). Upstream's Reserve
// needs its Filter's result for the chosen node, so Reserve runs upstream's
// Filter there first when the memo answered for it; were it to refuse, the
// memo forgets the node and the pod is retried (counted as Refuted).
type filterMemo struct {
	mu sync.RWMutex
	// shapes are the accepted nodes by claim shape, most recent last.
	shapes []*shapeMemo
}

// memoShapes bounds the claim shapes remembered: a cluster schedules a
// handful of templates at a time.
const memoShapes = 8

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

// memoCycle is one cycle's side of the memo: what its allocator reads, by
// node. It is written once in PreFilter and read by Filter's goroutines.
type memoCycle struct {
	memo    *filterMemo
	shape   string
	classes []*resourceapi.DeviceClass
	// local are the slices of each node; global those that may reach any
	// node (a node selector, all nodes, per-device node selection).
	local  map[string][]*resourceapi.ResourceSlice
	global []*resourceapi.ResourceSlice
	// poolInUse hashes the devices in use per pool; globalInUse those of
	// the global slices' pools.
	poolInUse   map[memoPool]uint64
	globalInUse uint64

	mu sync.Mutex
	// answered are the nodes the memo accepted this cycle.
	answered sets.Set[string]
}

type memoPool struct{ driver, pool string }

// Clone shares the cycle: a clone (nominated pods' pass, preemption's dry
// runs) reads the same allocator.
func (c *memoCycle) Clone() fwk.StateData { return c }

const memoCycleKey fwk.StateKey = Name + "/filter-memo"

var memoSeed = maphash.MakeSeed()

// newMemoCycle sets up the memo for a cycle whose pod pruning first served
// (first), from what upstream's PreFilter built its allocator from, or
// returns nil when the memo cannot answer for it.
func (pl *DRAScope) newMemoCycle(claims *podClaims) *memoCycle {
	if pl.filterMemo == nil || pl.features.EnableDRANodeAllocatableResources {
		return nil
	}
	seen, listed, ok := pl.manager.capture.peek()
	if !ok {
		return nil
	}
	c := &memoCycle{memo: pl.filterMemo}
	var shape []byte
	for _, claim := range claims.toAllocate {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly == nil {
				return nil
			}
			class, err := pl.deviceClass(request.Exactly.DeviceClassName)
			if err != nil {
				return nil
			}
			c.classes = append(c.classes, class)
		}
		spec, err := claim.Spec.Marshal()
		if err != nil {
			return nil
		}
		shape = append(shape, spec...)
		shape = append(shape, 0)
	}
	c.shape = string(shape)
	c.local = make(map[string][]*resourceapi.ResourceSlice, len(listed))
	globalPools := map[memoPool]bool{}
	for _, slice := range listed {
		if slice.Spec.NodeName != nil && *slice.Spec.NodeName != "" {
			c.local[*slice.Spec.NodeName] = append(c.local[*slice.Spec.NodeName], slice)
			continue
		}
		c.global = append(c.global, slice)
		globalPools[memoPool{slice.Spec.Driver, slice.Spec.Pool.Name}] = true
	}
	c.poolInUse = poolInUseHashes(seen.state)
	for pool := range globalPools {
		c.globalInUse ^= c.poolInUse[pool]
	}
	return c
}

// poolInUseHashes hashes, per pool, the devices in use, the shares in use
// and the capacity consumed: the XOR of one hash per element, so that the
// order of the sets does not matter.
func poolInUseHashes(state structured.AllocatedState) map[memoPool]uint64 {
	hashes := map[memoPool]uint64{}
	var h maphash.Hash
	h.SetSeed(memoSeed)
	add := func(driver, pool, device string, extra ...string) {
		h.Reset()
		h.WriteString(driver)
		h.WriteByte(0)
		h.WriteString(pool)
		h.WriteByte(0)
		h.WriteString(device)
		for _, e := range extra {
			h.WriteByte(0)
			h.WriteString(e)
		}
		key := memoPool{driver, pool}
		hashes[key] ^= h.Sum64()
	}
	for id := range state.AllocatedDevices {
		add(id.Driver.String(), id.Pool.String(), id.Device.String())
	}
	for id := range state.AllocatedSharedDeviceIDs {
		add(id.Driver.String(), id.Pool.String(), id.Device.String(), "share", id.ShareID.String())
	}
	for id, consumed := range state.AggregatedCapacity {
		for name, quantity := range consumed {
			add(id.Driver.String(), id.Pool.String(), id.Device.String(), "capacity", string(name), quantity.String())
		}
	}
	return hashes
}

// entryFor is what this cycle's allocator reads for node.
func (c *memoCycle) entryFor(node *v1.Node) memoEntry {
	local := c.local[node.Name]
	inUse := c.globalInUse
	pools := make([]memoPool, 0, 1)
	for _, slice := range local {
		pool := memoPool{slice.Spec.Driver, slice.Spec.Pool.Name}
		if !slices.Contains(pools, pool) {
			pools = append(pools, pool)
			inUse ^= c.poolInUse[pool]
		}
	}
	return memoEntry{node: node, classes: c.classes, local: local, global: c.global, inUse: inUse}
}

// accepts reports whether upstream's Filter accepted the node before, with
// what this cycle's allocator reads for it.
func (c *memoCycle) accepts(node *v1.Node) bool {
	c.memo.mu.RLock()
	shape := c.memo.shape(c.shape)
	var was memoEntry
	var ok bool
	if shape != nil {
		was, ok = shape.nodes[node.Name]
	}
	c.memo.mu.RUnlock()
	if !ok || !was.equal(c.entryFor(node)) {
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

// accepted remembers that upstream's Filter accepted the node this cycle.
func (c *memoCycle) accepted(node *v1.Node) {
	entry := c.entryFor(node)
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

// answeredFor reports whether the memo accepted the node this cycle.
func (c *memoCycle) answeredFor(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered.Has(node)
}

// forget drops the node from the memo, for every shape.
func (m *filterMemo) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, shape := range m.shapes {
		delete(shape.nodes, node)
	}
}

// shape is the memo of a claim shape, or nil; the caller holds mu.
func (m *filterMemo) shape(key string) *shapeMemo {
	for _, shape := range m.shapes {
		if shape.key == key {
			return shape
		}
	}
	return nil
}

func (e memoEntry) equal(o memoEntry) bool {
	return e.node == o.node && e.inUse == o.inUse && slices.Equal(e.classes, o.classes) &&
		slices.Equal(e.local, o.local) && slices.Equal(e.global, o.global)
}

// memoCycleIn is the cycle's memo, or nil.
func memoCycleIn(state fwk.CycleState) *memoCycle {
	c, _ := fromCycle[*memoCycle](state, memoCycleKey)
	return c
}

// filterMemoized runs Filter through the memo: a node accepted before with
// what this cycle's allocator reads for it is accepted without running
// upstream's Filter; one upstream's Filter accepts is remembered.
func (pl *DRAScope) filterMemoized(ctx context.Context, state fwk.CycleState, memo *memoCycle, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	node := nodeInfo.Node()
	if node == nil {
		return pl.filterExplained(ctx, state, pod, nodeInfo)
	}
	if memo.accepts(node) {
		metrics.ObserveFilterMemo(metrics.FilterMemoAccepted)
		return nil
	}
	status := pl.filterExplained(ctx, state, pod, nodeInfo)
	metrics.ObserveFilterMemo(metrics.FilterMemoRan)
	if status.IsSuccess() {
		memo.accepted(node)
	}
	return status
}

// filterChosenIfMemoized runs upstream's Filter on the chosen node when the
// memo answered for it, so that upstream's Reserve finds its result there.
func (pl *DRAScope) filterChosenIfMemoized(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	memo := memoCycleIn(state)
	if memo == nil || !memo.answeredFor(nodeName) {
		return nil
	}
	nodeInfo, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(err)
	}
	status := pl.filterExplained(ctx, state, pod, nodeInfo)
	if !status.IsSuccess() {
		metrics.ObserveFilterMemo(metrics.FilterMemoRefuted)
		klog.FromContext(ctx).Info("Upstream's Filter refused the node the filter memo accepted; forgetting the node", "pod", klog.KObj(pod), "node", nodeName, "status", status)
		memo.memo.forget(nodeName)
	}
	return status
}
