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

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/filtermemo"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	pl := &DRAScope{DynamicResources: upstream, enabled: true, features: fts, manager: manager, claims: manager.ResourceClaims(), index: index, filterMemo: &filtermemo.Memo{HashFromListing: listingFirst}, adminAccess: adminaccess.Guard{Enabled: true}}

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
					memo := memoIn(state)
					t.Logf("%s: kept by PreFilter %v, memo cycle %v, memo answered %v, upstream's Filter in DRAScope's cycle %v", name, result.AllNodes() || result.NodeNames.Has(name), memo != nil, memo != nil && memo.AnsweredFor(name), upstream.Filter(ctx, state, pod, info))
				}
			}
			t.Fatalf("step %d: DRAScope accepts %v, upstream %v", step, sets.List(got), sets.List(want))
		}
		if memo := memoIn(state); memo != nil {
			answered += memo.Answered()
			if memo.HashedFromListing() {
				fromListing += memo.Answered()
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
	if memo := memoIn(run()); memo == nil || memo.Answered() != len(infos) {
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
	seen, listed, ok := pl.manager.TakeCapture()
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
	memo := memoIn(state)
	if memo == nil {
		t.Fatal("no memo cycle")
	}
	full := infos[slices.IndexFunc(infos, func(info fwk.NodeInfo) bool { return info.Node().Name == "node-0" })]
	classes, _ := memo.Classes()
	memo.Accepted(full.Node(), classes)
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
	if memo.Accepts(full.Node()) {
		t.Error("the memo still accepts the refuted node")
	}
}
