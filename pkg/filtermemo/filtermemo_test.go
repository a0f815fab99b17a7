package filtermemo

import (
	"fmt"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/nodeprune"
)

const driver = "gpu.example.com"

// slice is a node's pool of devices gpu-0..gpu-(devices-1), in one slice.
func slice(node string, devices int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	return s
}

// TestFilterMemoTouch: the cycle's shape becomes the most recent, and every
// memoSweepEvery cycles the entries that could not be accepted again go:
// nodes gone or changed, and slices that are not the layout's.
func TestFilterMemoTouch(t *testing.T) {
	kept, changed, stale := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "changed"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}
	keptSlice, staleSlice, oldSlice := slice("kept", 1), slice("stale", 1), slice("stale", 1)
	layout := &Layout{nodes: map[string]int{"kept": 0, "stale": 1}, local: [][]*resourceapi.ResourceSlice{{keptSlice}, {staleSlice}}}
	memo := &Memo{shapes: []*shapeMemo{{key: "shape", nodes: map[string]memoEntry{
		"kept":    {node: kept, local: []*resourceapi.ResourceSlice{keptSlice}},
		"stale":   {node: stale, local: []*resourceapi.ResourceSlice{oldSlice}},
		"changed": {node: changed},
		"gone":    {node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}},
	}}, {key: "other", nodes: map[string]memoEntry{}}}}
	current := map[string]*v1.Node{"kept": kept, "stale": stale, "changed": changed.DeepCopy()}
	infos := func() map[string]*v1.Node { return current }
	memo.touch("shape", layout, infos)
	if memo.shapes[1].key != "shape" {
		t.Errorf("shapes %s, %s after a cycle of \"shape\": want it last", memo.shapes[0].key, memo.shapes[1].key)
	}
	for range memoSweepEvery - 2 {
		memo.touch("shape", layout, infos)
	}
	if n := len(memo.shapes[1].nodes); n != 4 {
		t.Fatalf("%d entries before the sweep, want 4", n)
	}
	memo.touch("shape", layout, infos)
	if got := sets.KeySet(memo.shapes[1].nodes); !got.Equal(sets.New("kept")) {
		t.Errorf("after the sweep: %v, want only the kept node", sets.List(got))
	}
}

// TestFilterMemoLayout: a node's pool counts for every node when the
// allocator reads its shared counters on every node, and a layout laid out
// without that is not reused with it.
func TestFilterMemoLayout(t *testing.T) {
	plain, counters := slice("node-0", 1), slice("node-1", 1)
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "memory"}}
	memo := &Memo{}
	listed := []*resourceapi.ResourceSlice{plain, counters}
	l := memo.LayoutOf(listed, false)
	if len(l.global) != 0 || len(l.nodes) != 2 {
		t.Fatalf("without countersReachEveryNode: global %d, nodes %v; want both slices their node's own", len(l.global), l.nodes)
	}
	l = memo.LayoutOf(listed, true)
	if len(l.global) != 1 || l.global[0] != counters || len(l.globalPools) != 1 || len(l.nodes) != 1 {
		t.Fatalf("with countersReachEveryNode: global %v, nodes %v; want the slice with counters everyone's", l.global, l.nodes)
	}
	if memo.LayoutOf(listed, true) != l {
		t.Error("the same listing laid out again")
	}
}

// TestInUseHashes: a share and a consumed capacity change their pool's
// hash, the order the sets are walked in does not, and a device counts
// where the cycle's layout puts its pool.
func TestInUseHashes(t *testing.T) {
	device := structured.MakeDeviceID(driver, "node-0", "gpu-0")
	pool := memoPool{device.Driver, device.Pool}
	state := func(share string, capacity string) structured.AllocatedState {
		s := structured.AllocatedState{AllocatedDevices: sets.New(device), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
		if share != "" {
			s.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(device, ptr.To(types.UID(share))))
		}
		if capacity != "" {
			s.AggregatedCapacity[device] = structured.ConsumedCapacity{"memory": ptr.To(resource.MustParse(capacity))}
		}
		return s
	}
	memo := &Memo{}
	// The pool is node 0's own in one layout, everyone's in the other.
	own := &Layout{generation: 1, local: make([][]*resourceapi.ResourceSlice, 1), buckets: map[memoPool]int32{pool: 0}}
	everyones := &Layout{generation: 2, local: make([][]*resourceapi.ResourceSlice, 2), buckets: map[memoPool]int32{pool: 2}}
	hash := func(s structured.AllocatedState) uint64 {
		h := memo.hashInUse(s, own, nil)
		if h.global != 0 {
			t.Errorf("a node's own pool counted for every node: %x", h.global)
		}
		return h.local[0]
	}
	base, share, other, capacity := hash(state("", "")), hash(state("a", "")), hash(state("b", "")), hash(state("", "1Gi"))
	if base == share || share == other || base == capacity || capacity == hash(state("", "2Gi")) {
		t.Errorf("hashes: none %x, share a %x, share b %x, 1Gi %x: each must differ", base, share, other, capacity)
	}
	if hash(state("a", "")) != share {
		t.Error("the same state hashed twice differs")
	}
	// The device's hash is cached with its place in the first layout:
	// in another layout it counts where that one puts its pool.
	if h := memo.hashInUse(state("", ""), everyones, nil); h.local[0] != 0 || h.local[1] != 0 || h.global != base {
		t.Errorf("in a layout where the pool reaches every node: local %x, global %x; want global %x", h.local, h.global, base)
	}
	if h := memo.hashInUse(state("", ""), own, nil); h.local[0] != base {
		t.Errorf("back in the first layout: %x, want %x", h.local[0], base)
	}
}

// TestHashInUseFromTheListing: hashed from the candidates' listed devices
// (pruning kept a few nodes of a nearly full cluster), each candidate's
// bucket and the pools that reach any node hash as from the devices in
// use; the other nodes are not hashed, and the memo answers nothing for
// them; a device listed twice in a pool counts once; and where the
// candidates, or the pools reaching any node alone, list more devices than
// are in use, the in-use side is taken.
func TestHashInUseFromTheListing(t *testing.T) {
	random := rand.New(rand.NewPCG(7, 11))
	var listed []*resourceapi.ResourceSlice
	for n := range 20 {
		listed = append(listed, slice(fmt.Sprintf("node-%d", n), 10))
	}
	// node-3's pool lists gpu-0 again, in a second slice.
	again := slice("node-3", 1)
	again.Name = "node-3-again"
	listed = append(listed, again)
	network := slice("network", 4)
	network.Spec.NodeName, network.Spec.AllNodes = nil, ptr.To(true)
	listed = append(listed, network)

	inUse := sets.New[structured.DeviceID]()
	for _, slice := range listed {
		for _, device := range slice.Spec.Devices {
			if random.IntN(10) > 0 {
				inUse.Insert(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name))
			}
		}
	}
	// In use, listed by no slice.
	inUse.Insert(structured.MakeDeviceID(driver, "node-4", "gpu-99"))
	state := structured.AllocatedState{AllocatedDevices: inUse}

	memo := &Memo{}
	l := memo.LayoutOf(listed, false)
	everyNode := memo.hashInUse(state, l, nil)
	if everyNode.known != nil {
		t.Fatal("without candidates: not every bucket hashed")
	}
	candidates := sets.New("node-3", "node-5", "gone")
	few := memo.hashInUse(state, l, candidates)
	if few.known == nil {
		t.Fatalf("3 candidates, %d devices in use: hashed from the in-use side", inUse.Len())
	}
	if few.global != everyNode.global {
		t.Errorf("the pool reaching every node: %x from the listing, %x from the devices in use", few.global, everyNode.global)
	}
	for node, b := range l.nodes {
		switch {
		case candidates.Has(node) && (!few.known[b] || few.local[b] != everyNode.local[b]):
			t.Errorf("candidate %s: hashed %v, %x from the listing, %x from the devices in use", node, few.known[b], few.local[b], everyNode.local[b])
		case !candidates.Has(node) && few.known[b]:
			t.Errorf("%s, no candidate: hashed", node)
		}
	}
	c := &Cycle{memo: memo, layout: l, inUse: few}
	if c.hashed("node-4") || !c.hashed("node-5") || !c.hashed("no-pool-of-its-own") {
		t.Errorf("hashed: node-4 %v, node-5 %v, a node without a pool %v; want false, true, true", c.hashed("node-4"), c.hashed("node-5"), c.hashed("no-pool-of-its-own"))
	}
	c.Accepted(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-4"}}, nil)
	if len(memo.shapes) != 0 {
		t.Error("an acceptance remembered for a node whose pool was not hashed")
	}

	many := sets.New[string]()
	for n := range 20 {
		many.Insert(fmt.Sprintf("node-%d", n))
	}
	if h := memo.hashInUse(state, l, many); h.known != nil {
		t.Errorf("every node a candidate, more devices listed (%d) than in use (%d): hashed from the listing", l.devices[len(l.local)]+200, inUse.Len())
	}
	// No candidate the layout knows, and fewer devices in use than the
	// pool reaching every node lists.
	two := sets.New(structured.MakeDeviceID(driver, "node-1", "gpu-0"), structured.MakeDeviceID(driver, "node-2", "gpu-0"))
	for _, none := range []sets.Set[string]{sets.New[string](), sets.New("gone")} {
		if h := memo.hashInUse(structured.AllocatedState{AllocatedDevices: two}, l, none); h.known != nil {
			t.Errorf("candidates %v, 2 devices in use, %d listed by the pool reaching every node: hashed from the listing", sets.List(none), l.devices[len(l.local)])
		}
	}
}

// TestPoolsReachingFromTheLayout: the layout serves every slice
// nodeprune.PoolsReaching serves for the candidates, and more only of
// pools whose slices name different nodes, on random listings of
// node-local, multi-slice, spanning, every-node, selected, per-device and
// empty-node-name pools, some with shared counters, some incomplete or
// with two generations listed.
func TestPoolsReachingFromTheLayout(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		random := rand.New(rand.NewPCG(seed, 3))
		nodes := 1 + random.IntN(30)
		node := func() string { return fmt.Sprintf("node-%d", random.IntN(nodes)) }
		var listed []*resourceapi.ResourceSlice
		spanning := sets.New[string]()
		for p := range 1 + random.IntN(60) {
			pool := fmt.Sprintf("pool-%d", p)
			count := 1 + random.IntN(3)
			// Some pools are incomplete (a slice not yet listed), some
			// being replaced (two generations listed).
			sliceCount := int64(count + random.IntN(2))
			kind := random.IntN(7)
			at := node()
			for i := range count {
				slice := slice(at, 2)
				slice.Name = fmt.Sprintf("%s-%d", pool, i)
				slice.Spec.Pool = resourceapi.ResourcePool{Name: pool, Generation: 1 + int64(random.IntN(2)), ResourceSliceCount: sliceCount}
				switch kind {
				case 1:
					if i > 0 {
						if other := node(); other != at {
							slice.Spec.NodeName = ptr.To(other)
							spanning.Insert(pool)
						}
					}
				case 2:
					slice.Spec.NodeName, slice.Spec.AllNodes = nil, ptr.To(true)
				case 3:
					slice.Spec.NodeName, slice.Spec.NodeSelector = nil, &v1.NodeSelector{}
				case 4:
					slice.Spec.NodeName, slice.Spec.PerDeviceNodeSelection = nil, ptr.To(true)
				case 5:
					slice.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "memory"}}
				case 6:
					slice.Spec.NodeName = ptr.To("")
				}
				listed = append(listed, slice)
			}
		}
		random.Shuffle(len(listed), func(i, j int) { listed[i], listed[j] = listed[j], listed[i] })
		candidates := sets.New[string]()
		for range random.IntN(nodes + 1) {
			candidates.Insert(node())
		}
		candidates.Insert("no-slice-names-it")
		for _, everywhere := range []bool{false, true} {
			memo := &Memo{}
			got := sets.New(memo.LayoutOf(listed, everywhere).Reaching(candidates)...)
			want := sets.New(nodeprune.PoolsReaching(listed, candidates, everywhere)...)
			if len(got) != len(memo.LayoutOf(listed, everywhere).Reaching(candidates)) {
				t.Errorf("seed %d: a slice served twice", seed)
			}
			for slice := range want {
				if !got.Has(slice) {
					t.Errorf("seed %d, counters everywhere %v: %s reaches a candidate and is not served", seed, everywhere, slice.Name)
				}
			}
			for slice := range got {
				if !want.Has(slice) && !spanning.Has(slice.Spec.Pool.Name) {
					t.Errorf("seed %d, counters everywhere %v: %s served, and reaches no candidate", seed, everywhere, slice.Name)
				}
			}
		}
	}
}
