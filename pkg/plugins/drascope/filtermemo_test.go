package drascope

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/metrics"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// TestFilterMemoAnswersAsUpstream is differential: on a small cluster that
// random steps change (claims allocated and released on node-local and
// network-attached pools, devices' attributes and devices added or removed
// in a slice, the class's selector, a node's labels that a network pool's
// node selector reads), each step runs one scheduling cycle of DRAScope
// (PreFilter, Filter on the nodes it keeps, its filter memo carried from
// step to step) and one of upstream's plugin alone (PreFilter, Filter on
// every node), and the nodes they accept must be the same. Reserve on an
// accepted node must succeed (the memo's acceptances are checked there
// by upstream's Filter). The memo must have answered for some nodes, or
// the test proves nothing.
func TestFilterMemoAnswersAsUpstream(t *testing.T) {
	for seed := range uint64(12) {
		// Odd seeds ask for admin access: every node's devices qualify,
		// in use or not, and pruning first does not serve the pod. Even
		// seeds from 4 on hash the devices in use from the candidates'
		// listing whenever pruning leaves some nodes out (on this small
		// cluster the in-use side is always the shorter).
		adminAccess, listingFirst := seed%2 == 1, seed%2 == 0 && seed >= 4
		t.Run(fmt.Sprintf("seed-%d/admin-access=%t/listing-first=%t", seed, adminAccess, listingFirst), func(t *testing.T) {
			testFilterMemo(t, seed, adminAccess, listingFirst)
		})
	}
}

func testFilterMemo(t *testing.T, seed uint64, adminAccess, listingFirst bool) {
	const nodeCount, devices, steps = 8, 2, 60
	random := rand.New(rand.NewPCG(seed, 7))
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	model := func() string { return []string{"a", "b"}[random.IntN(2)] }
	localSlice := func(node string, rv int) *resourceapi.ResourceSlice {
		slice := captureSlice(node, 0)
		slice.ResourceVersion = strconv.Itoa(rv)
		for i := range devices - 1 + random.IntN(2) {
			slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model": {StringValue: ptr.To(model())},
			}})
		}
		return slice
	}
	// Two network-attached pools: one for every node, one for the nodes
	// labelled zone=z1.
	networkSlice := func(name string, rv int) *resourceapi.ResourceSlice {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv)},
			Spec: resourceapi.ResourceSliceSpec{Driver: captureDriver, Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "net-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To(model())}}}}},
		}
		if name == "all" {
			slice.Spec.AllNodes = ptr.To(true)
		} else {
			slice.Spec.NodeSelector = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{"z1"}},
			}}}}
		}
		return slice
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: captureDriver, ResourceVersion: "1"}}
	mine := captureClaim("mine")
	mine.ResourceVersion = "1"
	if adminAccess {
		mine.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	}
	pod := capturePod(mine)
	objects := []runtime.Object{class, mine, pod}
	names := nodeNames(nodeCount)
	nodes := map[string]*v1.Node{}
	for _, name := range names {
		nodes[name] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "z" + strconv.Itoa(random.IntN(2))}}}
		objects = append(objects, localSlice(name, 1))
	}
	// Two pools of two slices each: one over node-0 and node-1, one with a
	// slice on node-2 and one for all nodes. A slice replaced may come
	// with its pool's next generation, which leaves the pool incomplete
	// until the other slice follows.
	generations := map[string]int64{"span": 1, "mixed": 1}
	partSlice := func(name string, rv int, bump bool) *resourceapi.ResourceSlice {
		pool, part, _ := strings.Cut(name, "-")
		if bump {
			generations[pool]++
		}
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv)},
			Spec:       resourceapi.ResourceSliceSpec{Driver: captureDriver, Pool: resourceapi.ResourcePool{Name: pool, Generation: generations[pool], ResourceSliceCount: 2}},
		}
		for i := range 1 + random.IntN(2) {
			slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("%s-%d", part, i), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model": {StringValue: ptr.To(model())},
			}})
		}
		switch name {
		case "span-a":
			slice.Spec.NodeName = ptr.To("node-0")
		case "span-b":
			slice.Spec.NodeName = ptr.To("node-1")
		case "mixed-a":
			slice.Spec.NodeName = ptr.To("node-2")
		default:
			slice.Spec.AllNodes = ptr.To(true)
		}
		return slice
	}
	pools := append(slices.Clone(names), "all", "zoned", "span", "mixed")
	objects = append(objects, networkSlice("all", 1), networkSlice("zoned", 1),
		partSlice("span-a", 1, false), partSlice("span-b", 1, false), partSlice("mixed-a", 1, false), partSlice("mixed-b", 1, false))

	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	upstream, manager, _, client := upstreamWithClient(ctx, t, objects, fts, nil)
	index := nodeprune.NewIndex(nodeprune.IndexOptions{SharesApart: fts.EnableDRAConsumableCapacity})
	pl := &DRAScope{DynamicResources: upstream, enabled: true, features: fts, manager: manager, claims: manager.ResourceClaims(), index: index, filterMemo: &filterMemo{listingFirst: listingFirst}, adminAccessEnabled: true}

	rv := 1
	// held are the fill claims by pool and device.
	held := map[string]*resourceapi.ResourceClaim{}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return done(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	sliceSeen := func(name, version string) func() bool {
		return func() bool {
			listed, err := manager.ResourceSlices().ListWithDeviceTaintRules()
			if err != nil {
				return false
			}
			for _, slice := range listed {
				if slice.Name == name {
					return slice.ResourceVersion == version
				}
			}
			return false
		}
	}
	devicesOf := func(pool string) []string {
		listed, _ := manager.ResourceSlices().ListWithDeviceTaintRules()
		var devices []string
		for _, slice := range listed {
			if slice.Spec.Pool.Name == pool {
				for _, device := range slice.Spec.Devices {
					devices = append(devices, device.Name)
				}
			}
		}
		return devices
	}

	// inUse reports whether upstream's claim tracker, which its event
	// handler keeps apart from the claims' cache, has pool/device in use:
	// both cycles of a step must see the step's change.
	inUse := func(key string) bool {
		pool, device, _ := strings.Cut(key, "/")
		devices, err := manager.SharedDRAManager.ResourceClaims().ListAllAllocatedDevices()
		return err == nil && devices.Has(structured.MakeDeviceID(captureDriver, pool, device))
	}
	// hold allocates pool/device to a new claim.
	hold := func(name, key string) {
		pool, device, _ := strings.Cut(key, "/")
		claim := captureClaim(name, pool, device)
		claim.ResourceVersion = "1"
		if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		held[key] = claim
		index.SetClaim(claim)
		waitFor("an allocation", func() bool {
			_, err := manager.ResourceClaims().Get(claim.Namespace, claim.Name)
			return err == nil && inUse(key)
		})
	}
	if listingFirst {
		// The pools that may reach several nodes start full, so that
		// pruning leaves out the nodes whose own devices are held.
		for _, pool := range pools[len(names):] {
			for _, device := range devicesOf(pool) {
				hold("start-"+pool+"-"+device, pool+"/"+device)
			}
		}
	}
	answered, fromListing := 0, 0
	for step := range steps {
		rv++
		switch change := random.IntN(10); {
		case change < 5:
			// Allocate a free device of a random pool, or release a held one.
			pool := pools[random.IntN(len(pools))]
			ds := devicesOf(pool)
			if len(ds) == 0 {
				continue
			}
			key := pool + "/" + ds[random.IntN(len(ds))]
			if claim, ok := held[key]; ok {
				if err := client.ResourceV1().ResourceClaims(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				delete(held, key)
				index.DeleteClaim(claim)
				waitFor("a release", func() bool {
					_, err := manager.ResourceClaims().Get(claim.Namespace, claim.Name)
					return err != nil && !inUse(key)
				})
				break
			}
			hold(fmt.Sprintf("fill-%d", step), key)
		case change < 7:
			// A slice changes: new attributes, a device more or less.
			pool := pools[random.IntN(len(pools))]
			var slice *resourceapi.ResourceSlice
			switch pool {
			case "all", "zoned":
				slice = networkSlice(pool, rv)
			case "span", "mixed":
				slice = partSlice(pool+"-"+[]string{"a", "b"}[random.IntN(2)], rv, random.IntN(2) == 0)
			default:
				slice = localSlice(pool, rv)
			}
			if _, err := client.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor("a slice", sliceSeen(slice.Name, slice.ResourceVersion))
		case change < 8:
			// The class selects one model, or every device.
			class = class.DeepCopy()
			class.ResourceVersion = strconv.Itoa(rv)
			class.Spec.Selectors = nil
			if m := random.IntN(3); m < 2 {
				class.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes[%q].model == %q`, captureDriver, []string{"a", "b"}[m]),
				}}}
			}
			if _, err := client.ResourceV1().DeviceClasses().Update(ctx, class, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor("a class", func() bool {
				got, err := manager.DeviceClasses().Get(class.Name)
				return err == nil && got.ResourceVersion == class.ResourceVersion
			})
		default:
			// A node moves to the other zone.
			name := names[random.IntN(len(names))]
			node := nodes[name].DeepCopy()
			node.Labels["zone"] = map[string]string{"z0": "z1", "z1": "z0"}[node.Labels["zone"]]
			nodes[name] = node
		}

		var nodeObjects []*v1.Node
		for _, name := range names {
			nodeObjects = append(nodeObjects, nodes[name])
		}
		infos, err := internalcache.NewSnapshot(nil, nodeObjects).NodeInfos().List()
		if err != nil {
			t.Fatal(err)
		}
		pl.handle = snapshotHandle{snapshot: internalcache.NewSnapshot(nil, nodeObjects)}

		want := sets.New[string]()
		upstreamState := framework.NewCycleState()
		if _, status := upstream.PreFilter(ctx, upstreamState, pod, infos); status.IsSuccess() {
			for _, info := range infos {
				if upstream.Filter(ctx, upstreamState, pod, info).IsSuccess() {
					want.Insert(info.Node().Name)
				}
			}
		}

		got := sets.New[string]()
		state := framework.NewCycleState()
		result, status := pl.PreFilter(ctx, state, pod, infos)
		if status.IsSuccess() {
			for _, info := range infos {
				if (result.AllNodes() || result.NodeNames.Has(info.Node().Name)) && pl.Filter(ctx, state, pod, info).IsSuccess() {
					got.Insert(info.Node().Name)
				}
			}
		}
		if !got.Equal(want) {
			for _, info := range infos {
				name := info.Node().Name
				if want.Has(name) != got.Has(name) {
					memo := memoCycleIn(state)
					t.Logf("%s: kept by PreFilter %v, memo cycle %v, memo answered %v, upstream's Filter in DRAScope's cycle %v", name, result.AllNodes() || result.NodeNames.Has(name), memo != nil, memo != nil && memo.answeredFor(name), upstream.Filter(ctx, state, pod, info))
				}
			}
			t.Fatalf("step %d: DRAScope accepts %v, upstream %v", step, sets.List(got), sets.List(want))
		}
		if memo := memoCycleIn(state); memo != nil {
			answered += memo.answered.Len()
			if memo.inUse.known != nil {
				fromListing += memo.answered.Len()
			}
		}
		if got.Len() > 0 {
			node := sets.List(got)[random.IntN(got.Len())]
			if status := pl.Reserve(ctx, state, pod, node); !status.IsSuccess() {
				t.Fatalf("step %d: Reserve on %s: %v", step, node, status)
			}
			pl.Unreserve(ctx, state, pod, node)
		}
	}
	if answered == 0 {
		t.Fatal("the filter memo never answered")
	}
	if listingFirst && fromListing == 0 {
		t.Fatal("the filter memo never answered in a cycle hashed from the candidates' listing")
	}
	t.Logf("the filter memo answered for %d nodes over %d steps, %d in cycles hashed from the listing", answered, steps, fromListing)
}

// TestFilterMemoSkipsWhatItCannotAnswer: the memo answers every node in the
// second cycle of a pod on an unchanged cluster, and sets up no cycle for a
// prioritized list (upstream's Score reads Filter's results).
func TestFilterMemoSkipsWhatItCannotAnswer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	pl, _, _, pod, infos := heldCluster(ctx, t, nodeNames(4), 2, func(string, int) bool { return true }, fts)
	run := func() fwk.CycleState {
		state := framework.NewCycleState()
		if _, status := pl.PreFilter(ctx, state, pod, infos); !status.IsSuccess() {
			t.Fatal(status)
		}
		for _, info := range infos {
			if status := pl.Filter(ctx, state, pod, info); !status.IsSuccess() {
				t.Fatal(status)
			}
		}
		return state
	}
	run()
	if memo := memoCycleIn(run()); memo == nil || memo.answered.Len() != len(infos) {
		t.Fatalf("the second cycle of a pod on an unchanged cluster: memo %v, want every node answered", memo)
	}

	claim, err := pl.claims.Get("default", "mine")
	if err != nil {
		t.Fatal(err)
	}
	claim = claim.DeepCopy()
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "one", DeviceClassName: captureDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}}
	seen, listed, ok := pl.manager.capture.take()
	if !ok {
		t.Fatal("the last cycle captured no allocator's inputs")
	}
	if newMemo := pl.newMemoCycle(&podClaims{toAllocate: []*resourceapi.ResourceClaim{claim}}, infos, &cycleView{seen: seen, slices: listed}, nil); newMemo != nil {
		t.Error("a prioritized list got a memo cycle")
	}
}

// TestReserveChecksWhatTheMemoAccepted: were the memo to accept a node
// upstream's allocator refuses (here planted), Reserve runs upstream's
// Filter on it and fails with an error (the pod retries with backoff: no
// event may come for an input the memo does not compare) instead of
// reserving nothing, counts it, and the memo forgets everything.
func TestReserveChecksWhatTheMemoAccepted(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	// node-0 is full, the others have a free GPU.
	pl, _, _, pod, infos := heldCluster(ctx, t, nodeNames(3), 2, func(node string, _ int) bool { return node != "node-0" }, fts)
	state := framework.NewCycleState()
	result, status := pl.PreFilter(ctx, state, pod, infos)
	if !status.IsSuccess() || result.AllNodes() || result.NodeNames.Has("node-0") {
		t.Fatalf("PreFilter: %v, %v; want node-0 pruned", result, status)
	}
	memo := memoCycleIn(state)
	if memo == nil {
		t.Fatal("no memo cycle")
	}
	full := infos[slices.IndexFunc(infos, func(info fwk.NodeInfo) bool { return info.Node().Name == "node-0" })]
	classes, _ := memo.classes()
	memo.accepted(full.Node(), classes)
	if status := pl.Filter(ctx, state, pod, full); !status.IsSuccess() {
		t.Fatalf("Filter on the planted node: %v, want the memo's acceptance", status)
	}
	metrics.Register() // an unregistered counter counts nothing
	refuted := func() float64 {
		v, err := testutil.GetCounterMetricValue(metrics.FilterMemo.WithLabelValues(metrics.FilterMemoRefuted))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := refuted()
	if status := pl.Reserve(ctx, state, pod, "node-0"); status.Code() != fwk.Error || !strings.Contains(status.Message(), "filter memo accepted") {
		t.Fatalf("Reserve on a full node the memo accepted: %v, want an error (retried with backoff) naming the memo", status)
	}
	if refuted() != before+1 {
		t.Error("the refutation was not counted")
	}
	if memo.accepts(full.Node()) {
		t.Error("the memo still accepts the refuted node")
	}
}

// TestFilterMemoTouch: the cycle's shape becomes the most recent, and every
// memoSweepEvery cycles the entries that could not be accepted again go:
// nodes gone or changed, and slices that are not the layout's.
func TestFilterMemoTouch(t *testing.T) {
	kept, changed, stale := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "changed"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}
	keptSlice, staleSlice, oldSlice := captureSlice("kept", 1), captureSlice("stale", 1), captureSlice("stale", 1)
	layout := &memoLayout{nodes: map[string]int{"kept": 0, "stale": 1}, local: [][]*resourceapi.ResourceSlice{{keptSlice}, {staleSlice}}}
	memo := &filterMemo{shapes: []*shapeMemo{{key: "shape", nodes: map[string]memoEntry{
		"kept":    {node: kept, local: []*resourceapi.ResourceSlice{keptSlice}},
		"stale":   {node: stale, local: []*resourceapi.ResourceSlice{oldSlice}},
		"changed": {node: changed},
		"gone":    {node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}},
	}}, {key: "other", nodes: map[string]memoEntry{}}}}
	infos, err := internalcache.NewSnapshot(nil, []*v1.Node{kept, stale, changed.DeepCopy()}).NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}
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
	plain, counters := captureSlice("node-0", 1), captureSlice("node-1", 1)
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "memory"}}
	memo := &filterMemo{}
	listed := []*resourceapi.ResourceSlice{plain, counters}
	l := memo.layoutOf(listed, false)
	if len(l.global) != 0 || len(l.nodes) != 2 {
		t.Fatalf("without countersReachEveryNode: global %d, nodes %v; want both slices their node's own", len(l.global), l.nodes)
	}
	l = memo.layoutOf(listed, true)
	if len(l.global) != 1 || l.global[0] != counters || len(l.globalPools) != 1 || len(l.nodes) != 1 {
		t.Fatalf("with countersReachEveryNode: global %v, nodes %v; want the slice with counters everyone's", l.global, l.nodes)
	}
	if memo.layoutOf(listed, true) != l {
		t.Error("the same listing laid out again")
	}
}

// TestInUseHashes: a share and a consumed capacity change their pool's
// hash, the order the sets are walked in does not, and a device counts
// where the cycle's layout puts its pool.
func TestInUseHashes(t *testing.T) {
	device := structured.MakeDeviceID(captureDriver, "node-0", "gpu-0")
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
	memo := &filterMemo{}
	// The pool is node 0's own in one layout, everyone's in the other.
	own := &memoLayout{generation: 1, local: make([][]*resourceapi.ResourceSlice, 1), buckets: map[memoPool]int32{pool: 0}}
	everyones := &memoLayout{generation: 2, local: make([][]*resourceapi.ResourceSlice, 2), buckets: map[memoPool]int32{pool: 2}}
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
		listed = append(listed, captureSlice(fmt.Sprintf("node-%d", n), 10))
	}
	// node-3's pool lists gpu-0 again, in a second slice.
	again := captureSlice("node-3", 1)
	again.Name = "node-3-again"
	listed = append(listed, again)
	network := captureSlice("network", 4)
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
	inUse.Insert(structured.MakeDeviceID(captureDriver, "node-4", "gpu-99"))
	state := structured.AllocatedState{AllocatedDevices: inUse}

	memo := &filterMemo{}
	l := memo.layoutOf(listed, false)
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
	c := &memoCycle{memo: memo, layout: l, inUse: few}
	if c.hashed("node-4") || !c.hashed("node-5") || !c.hashed("no-pool-of-its-own") {
		t.Errorf("hashed: node-4 %v, node-5 %v, a node without a pool %v; want false, true, true", c.hashed("node-4"), c.hashed("node-5"), c.hashed("no-pool-of-its-own"))
	}
	c.accepted(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-4"}}, nil)
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
	two := sets.New(structured.MakeDeviceID(captureDriver, "node-1", "gpu-0"), structured.MakeDeviceID(captureDriver, "node-2", "gpu-0"))
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
				slice := captureSlice(at, 2)
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
			memo := &filterMemo{}
			got := sets.New(memo.layoutOf(listed, everywhere).reaching(candidates)...)
			want := sets.New(nodeprune.PoolsReaching(listed, candidates, everywhere)...)
			if len(got) != len(memo.layoutOf(listed, everywhere).reaching(candidates)) {
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
