package nodeprune_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/nodeprune"
)

// The index's differential test: a random cluster from internal/dracases,
// then random steps (allocations, releases, deletions, the scheduler's
// in-flight and assumed allocations and their restores, slices replaced,
// removed and tainted, devices held or withheld) delivered to the index and
// to a model of upstream's claim tracker at different times: either may be
// several informer events ahead of the other. After every step the index
// answers for the pod's claims, and:
//   - every node upstream's allocator accepts over the model's in-use set
//     (what the cycle's PreFilter gathered) is a candidate;
//   - where the index pruned on its own word (Indexed), its answer is the
//     walk's (Candidates) over the same set, node for node.
//
// The model recomputes the in-use set from scratch from the claims it has
// seen, so it shares no code with the index's incremental counts.

// world is the cluster's claims as the API has them, the stream of informer
// events, and how far each view has read it.
type world struct {
	r      *rand.Rand
	rv     int
	claims map[string]*resourceapi.ResourceClaim
	stream []event
	// upstream: the model of the claim tracker's cache (informer and
	// assumed versions, as the assume cache keeps them) and its
	// in-flight allocations.
	upstream  map[string]*cached
	upstreamN int
	inFlight  map[types.UID]*resourceapi.ResourceClaim
	indexN    int
	index     *nodeprune.Index
	sharesOff bool
}

// cached is the assume cache's entry: the informer's version it accepted
// and the version that counts (an assumed one, or that).
type cached struct{ api, latest *resourceapi.ResourceClaim }

type event struct {
	claim   *resourceapi.ResourceClaim
	deleted bool
}

func (w *world) nextRV() string { w.rv++; return strconv.Itoa(w.rv) }

func key(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// write changes a claim in the API: the informer will deliver it.
func (w *world) write(claim *resourceapi.ResourceClaim, deleted bool) {
	if deleted {
		delete(w.claims, key(claim))
	} else {
		w.claims[key(claim)] = claim
	}
	w.stream = append(w.stream, event{claim: claim, deleted: deleted})
}

// deliverUpstream applies the next informer event to the model, with the
// assume cache's rule: an older or equal version does not replace a newer
// (assumed) one; a deletion removes the assumed one too.
func (w *world) deliverUpstream() {
	e := w.stream[w.upstreamN]
	w.upstreamN++
	k := key(e.claim)
	if e.deleted {
		delete(w.upstream, k)
		return
	}
	if old := w.upstream[k]; old != nil && rvOf(old.latest) >= rvOf(e.claim) {
		return
	}
	w.upstream[k] = &cached{api: e.claim, latest: e.claim}
}

func (w *world) deliverIndex() {
	e := w.stream[w.indexN]
	w.indexN++
	if e.deleted {
		w.index.DeleteClaim(e.claim)
	} else {
		w.index.SetClaim(e.claim)
	}
}

// sortedKeys keeps the steps of a seed the same from run to run.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func rvOf(c *resourceapi.ResourceClaim) int {
	n, _ := strconv.Atoi(c.ResourceVersion)
	return n
}

// inUse is the model's in-use set: what PreFilter gathers.
func (w *world) inUse() sets.Set[structured.DeviceID] {
	s := sets.New[structured.DeviceID]()
	add := func(c *resourceapi.ResourceClaim) {
		if c.Status.Allocation == nil {
			return
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) || (!w.sharesOff && r.ShareID != nil) {
				continue
			}
			s.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	for _, c := range w.upstream {
		add(c.latest)
	}
	for _, c := range w.inFlight {
		add(c)
	}
	return s
}

func allDevices(slices []*resourceapi.ResourceSlice) []resourceapi.DeviceRequestAllocationResult {
	var all []resourceapi.DeviceRequestAllocationResult
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			all = append(all, resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name})
		}
	}
	return all
}

// allocated is a new claim version holding a few random devices.
func (w *world) allocated(name string, devices []resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: w.nextRV()}}
	if len(devices) == 0 {
		return claim
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	// Devices no claim holds, as an allocator picks them; rarely one
	// another claim holds too, as two schedulers racing leave it.
	held := sets.New[string]()
	for _, other := range w.claims {
		if other.Status.Allocation != nil {
			for _, r := range other.Status.Allocation.Devices.Results {
				held.Insert(r.Pool + "/" + r.Device)
			}
		}
	}
	for range 1 + w.r.IntN(3) {
		result := devices[w.r.IntN(len(devices))]
		for try := 0; try < 5 && held.Has(result.Pool+"/"+result.Device) && w.r.IntN(20) != 0; try++ {
			result = devices[w.r.IntN(len(devices))]
		}
		switch w.r.IntN(12) {
		case 0:
			result.AdminAccess = ptr.To(true)
		case 1:
			result.ShareID = ptr.To(types.UID("share"))
		}
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results, result)
	}
	return claim
}

// outcomes counts how the index answered, so that a generator that stops
// reaching a path fails the test.
type outcomes struct {
	steps, indexed, fallback, everywhere, acceptedWhenIndexed int
}

func runIndexCase(t *testing.T, seed uint64, o *outcomes) {
	t.Helper()
	c := dracases.New(seed)
	r := rand.New(rand.NewPCG(seed, 7))
	var got []nodeprune.Outcome
	w := &world{
		r: r, claims: map[string]*resourceapi.ResourceClaim{},
		inFlight: map[types.UID]*resourceapi.ResourceClaim{}, sharesOff: r.IntN(2) == 0, upstream: map[string]*cached{},
	}
	w.index = nodeprune.NewIndex(nodeprune.IndexOptions{SharesApart: !w.sharesOff, Observe: func(o nodeprune.Outcome) { got = append(got, o) }})
	// Slices as the apiserver serves them, with a UID and a version; some
	// without, as slices built by hand are.
	for i, slice := range c.Slices {
		if r.IntN(4) != 0 {
			slice.UID, slice.ResourceVersion = types.UID(fmt.Sprintf("slice-%d", i)), "1"
		}
	}
	slices := append([]*resourceapi.ResourceSlice(nil), c.Slices...)
	devices := allDevices(slices)
	// The cluster's claims to start with: as full as the case made it.
	held := c.InUse.UnsortedList()
	sort.Slice(held, func(i, j int) bool {
		return held[i].Pool.String()+"/"+held[i].Device.String() < held[j].Pool.String()+"/"+held[j].Device.String()
	})
	for i, id := range held {
		name := fmt.Sprintf("held-%d", i)
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: w.nextRV()},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "req", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()}}}}}}
		w.write(claim, false)
	}
	for w.upstreamN < len(w.stream) {
		w.deliverUpstream()
	}
	for w.indexN < len(w.stream) {
		w.deliverIndex()
	}

	for step := range 25 {
		// The cluster changes.
		switch r.IntN(9) {
		case 0, 1: // a claim allocated by someone, or a new version of an allocated one (an allocation is immutable)
			name := fmt.Sprintf("c-%d", r.IntN(12))
			if current := w.claims["ns/"+name]; current != nil && current.Status.Allocation != nil {
				next := current.DeepCopy()
				next.ResourceVersion = w.nextRV()
				w.write(next, false)
			} else {
				w.write(w.allocated(name, devices), false)
			}
		case 2: // deallocated
			for _, k := range sortedKeys(w.claims) {
				w.write(w.allocated(w.claims[k].Name, nil), false)
				break
			}
		case 3: // deleted
			for _, k := range sortedKeys(w.claims) {
				w.write(w.claims[k], true)
				break
			}
		case 4: // the scheduler's own allocation of a claim its cache has: in flight, then written and assumed
			for _, k := range sortedKeys(w.upstream) {
				entry := w.upstream[k]
				if entry.latest.Status.Allocation != nil {
					continue // the scheduler allocates only claims that are not
				}
				claim := w.allocated(entry.latest.Name, devices)
				w.inFlight[claim.UID] = claim
				w.index.PendingAllocation(claim)
				if r.IntN(3) == 0 {
					break // still in flight
				}
				delete(w.inFlight, claim.UID)
				w.index.PendingAllocationRemoved(claim.UID)
				w.write(claim, false)
				entry.latest = claim
				w.index.Assumed(claim)
				break
			}
		case 5: // an assumed version restored to the informer's, as after a failed write
			for _, k := range sortedKeys(w.upstream) {
				entry := w.upstream[k]
				if entry.latest == entry.api {
					continue
				}
				entry.latest = entry.api
				w.index.AssumeRestored(entry.api.Namespace, entry.api.Name)
				break
			}
		case 6: // a slice replaced by a new object, maybe tainted or a device fewer
			i := r.IntN(len(slices) + 1)
			if i == len(slices) {
				break
			}
			s := slices[i].DeepCopy()
			if len(s.Spec.Devices) > 0 {
				switch r.IntN(4) {
				case 0: // updated by its driver: a new version
					s.Spec.Devices = s.Spec.Devices[:len(s.Spec.Devices)-1]
					s.ResourceVersion = w.nextRV()
				case 1: // tainted by a DeviceTaintRule: a patched copy of the same version
					s.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
				case 2: // reordered by BestFit: a copy of the same version
					s.Spec.Devices = append(s.Spec.Devices[1:len(s.Spec.Devices):len(s.Spec.Devices)], s.Spec.Devices[0])
				}
			}
			slices[i] = s
		case 7: // a slice gone, or back
			if r.IntN(2) == 0 && len(slices) > 1 {
				i := r.IntN(len(slices))
				slices = append(slices[:i:i], slices[i+1:]...)
			} else if len(c.Slices) > 0 {
				back := c.Slices[r.IntN(len(c.Slices))]
				listed := false
				for _, s := range slices {
					listed = listed || s.Name == back.Name
				}
				if !listed {
					slices = append(slices[:len(slices):len(slices)], back)
				}
			}
		}
		// The informer's events reach each view in their own time.
		for w.upstreamN < len(w.stream) && r.IntN(3) != 0 {
			w.deliverUpstream()
		}
		for w.indexN < len(w.stream) && r.IntN(3) != 0 {
			w.deliverIndex()
		}

		// The cycle: the gathered in-use set, with held and withheld
		// devices added as the decorator adds them.
		inUse := w.inUse()
		kept, withheld := sets.New[structured.DeviceID](), sets.New[structured.DeviceID]()
		for _, d := range devices {
			id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
			switch r.IntN(25) {
			case 0:
				kept.Insert(id)
			case 1:
				kept.Insert(id)
				withheld.Insert(id)
			}
		}
		inUse = inUse.Union(kept)
		view := nodeprune.View{Slices: slices, InUse: inUse, Withheld: withheld, Kept: kept}
		has := func(name string) bool {
			for _, n := range c.Nodes {
				if n.Name == name {
					return true
				}
			}
			return false
		}
		got = got[:0]
		names, all := w.index.Candidates(c.Claims, dracases.Classes.Get, view, nodeprune.Nodes{Count: len(c.Nodes), Has: has, List: func() []*v1.Node { return c.Nodes }})
		walked, walkedAll := nodeprune.Candidates(c.Claims, dracases.Classes.Get, view, c.Nodes)
		o.steps++
		outcome := nodeprune.Outcome("")
		if len(got) == 1 {
			outcome = got[0]
		}
		switch outcome {
		case nodeprune.Indexed:
			o.indexed++
			if walkedAll || !walked.Equal(names) {
				t.Fatalf("seed %d step %d: the index pruned to %v, the walk over the same in-use set to %v (all %v)", seed, step, sets.List(names), sets.List(walked), walkedAll)
			}
		case nodeprune.Fallback:
			o.fallback++
		case nodeprune.Everywhere:
			o.everywhere++
		default:
			if !all {
				t.Fatalf("seed %d step %d: pruned without saying how (%v)", seed, step, got)
			}
		}
		if all {
			continue
		}
		for setName, features := range dracases.FeatureSets {
			allocator, err := allocatorOver(features, inUse, slices)
			if err != nil {
				t.Fatalf("seed %d step %d, features %s: building the allocator: %v", seed, step, setName, err)
			}
			for _, node := range c.Nodes {
				results, err := allocator.Allocate(context.Background(), node, c.Claims)
				if err != nil || len(results) != len(c.Claims) {
					continue
				}
				if outcome == nodeprune.Indexed {
					o.acceptedWhenIndexed++
				}
				if !names.Has(node.Name) {
					t.Fatalf("seed %d step %d, features %s: the allocator accepts %s, which the index (%s) dropped (candidates %v)\nclaims: %s",
						seed, step, setName, node.Name, outcome, sets.List(names), dracases.DescribeClaims(c.Claims))
				}
			}
		}
	}
}

// TestIndexKeepsEveryNodeTheAllocatorAccepts runs 400 seeded cases of 25
// steps each.
func TestIndexKeepsEveryNodeTheAllocatorAccepts(t *testing.T) {
	var o outcomes
	for seed := range uint64(400) {
		runIndexCase(t, seed, &o)
	}
	t.Logf("%+v", o)
	// Each path must be taken often: pruning by the index, with nodes the
	// allocator accepts; falling back while the views disagree; and
	// finding every node qualifies.
	if o.indexed < o.steps/10 || o.acceptedWhenIndexed < o.steps/20 || o.fallback < o.steps/20 || o.everywhere < o.steps/20 {
		t.Errorf("the steps reached too few of the index's paths: %+v", o)
	}
}

// FuzzIndex explores more seeds: go test -fuzz FuzzIndex ./pkg/nodeprune
func FuzzIndex(f *testing.F) {
	for _, seed := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		runIndexCase(t, seed, &outcomes{})
	})
}

// A release the index has not been told of yet, though upstream's tracker
// has: the index still counts node-0's GPU held, but the cycle's in-use set
// does not, so the index must not prune node-0 on its own word.
func TestIndexFallsBackWhileItLags(t *testing.T) {
	nodes := []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}}
	slices := []*resourceapi.ResourceSlice{nodeLocal("node-0", gpuDriver, "gpu-0"), nodeLocal("node-1", gpuDriver, "gpu-0"), nodeLocal("node-2", gpuDriver, "gpu-0")}
	holding := func(name, node string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), ResourceVersion: "1"},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "req", Driver: gpuDriver, Pool: node, Device: "gpu-0"}}}}}}
	}
	var outcomes []nodeprune.Outcome
	index := nodeprune.NewIndex(nodeprune.IndexOptions{Observe: func(o nodeprune.Outcome) { outcomes = append(outcomes, o) }})
	index.SetClaim(holding("a", "node-0"))
	index.SetClaim(holding("b", "node-2"))
	nodeSet := nodeprune.Nodes{Count: 3, Has: func(string) bool { return true }, List: func() []*v1.Node { return nodes }}
	gpu := func(node string) structured.DeviceID { return structured.MakeDeviceID(gpuDriver, node, "gpu-0") }

	// In step: the index prunes to node-1.
	view := nodeprune.View{Slices: slices, InUse: sets.New(gpu("node-0"), gpu("node-2"))}
	names, all := index.Candidates([]*resourceapi.ResourceClaim{claimOf("gpu")}, testClasses.Get, view, nodeSet)
	if all || !names.Equal(sets.New("node-1")) || outcomes[0] != nodeprune.Indexed {
		t.Fatalf("in step: candidates %v (all %v, %v), want node-1 from the index", sets.List(names), all, outcomes)
	}
	// Upstream saw claim a deleted and its place taken by a claim on
	// node-1: the same number of devices in use, other devices.
	view.InUse = sets.New(gpu("node-1"), gpu("node-2"))
	names, all = index.Candidates([]*resourceapi.ResourceClaim{claimOf("gpu")}, testClasses.Get, view, nodeSet)
	if all || !names.Equal(sets.New("node-0")) || outcomes[1] != nodeprune.Fallback {
		t.Fatalf("lagging: candidates %v (all %v, %v), want node-0 from the walk", sets.List(names), all, outcomes)
	}
}

// An in-flight allocation the decorator reported after upstream had
// already dropped it (a sharer's removal came in between): the index
// holds it, the cycle's set does not. The check fails once, the index
// asks the claim tracker which allocations are still in flight, and the
// next pod is answered by the index again.
func TestIndexForgetsInFlightAllocationsUpstreamDropped(t *testing.T) {
	nodes := []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}
	listed := []*resourceapi.ResourceSlice{nodeLocal("node-0", gpuDriver, "gpu-0"), nodeLocal("node-1", gpuDriver, "gpu-0")}
	var outcomes []nodeprune.Outcome
	index := nodeprune.NewIndex(nodeprune.IndexOptions{Observe: func(o nodeprune.Outcome) { outcomes = append(outcomes, o) }})
	held := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "held", UID: "held", ResourceVersion: "1"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "req", Driver: gpuDriver, Pool: "node-1", Device: "gpu-0"}}}}}}
	index.SetClaim(held)
	dropped := held.DeepCopy()
	dropped.Name, dropped.UID = "dropped", "dropped"
	dropped.Status.Allocation.Devices.Results[0].Pool = "node-0"
	index.PendingAllocation(dropped)

	view := nodeprune.View{Slices: listed, InUse: sets.New(structured.MakeDeviceID(gpuDriver, "node-1", "gpu-0")),
		InFlight: func(uid types.UID) bool { return false }}
	nodeSet := nodeprune.Nodes{Count: 2, Has: func(string) bool { return true }, List: func() []*v1.Node { return nodes }}
	for range 2 {
		names, all := index.Candidates([]*resourceapi.ResourceClaim{claimOf("gpu")}, testClasses.Get, view, nodeSet)
		if all || !names.Equal(sets.New("node-0")) {
			t.Fatalf("candidates %v (all %v), want node-0", sets.List(names), all)
		}
	}
	if want := []nodeprune.Outcome{nodeprune.Fallback, nodeprune.Indexed}; !slices.Equal(outcomes, want) {
		t.Errorf("answers %v, want %v", outcomes, want)
	}
}
