package nodeprune

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/pkg/deviceclass"
)

// Shortage is why pruning left no node, for the first request that no node
// has enough free devices for: what it asks, how many nodes reach a
// matching device, and the most free ones a node reaches. It is what the
// pending pod's message says after the scheduler's own "cannot allocate
// all claims".
type Shortage struct {
	// Together says that no request is short by count: every request has
	// nodes with enough free matching devices, so what refused the pod is
	// what counting cannot see (taints, counters, capacity, constraints)
	// or the requests together. The other fields are then empty.
	Together              bool
	Claim, Request, Class string
	// Count is the devices asked for (0: all of the node's).
	Count int
	// NodesWithMatching reach a device the class and the request's
	// selectors accept; MostFree is the most free ones a node reaches,
	// on NodesWithMostFree nodes.
	NodesWithMatching, MostFree, NodesWithMostFree int
}

// String is the pending pod's reason, at most a few hundred bytes: a
// claim's and a request's name are bounded by the API.
func (s Shortage) String() string {
	if s.Together {
		return TogetherNote
	}
	what := fmt.Sprintf("%d × %s", s.Count, s.Class)
	if s.Count == 0 {
		what = "all " + s.Class + " devices of a node"
	}
	prefix := fmt.Sprintf("claim %s, request %s (%s): ", s.Claim, s.Request, what)
	switch {
	case s.NodesWithMatching == 0:
		return prefix + "no node has a matching device"
	case s.MostFree == 0:
		return prefix + fmt.Sprintf("%s matching devices, none has one free", nodesHave(s.NodesWithMatching))
	}
	need := fmt.Sprint(s.Count)
	if s.Count == 0 {
		need = "all"
	}
	on := fmt.Sprintf("%d nodes", s.NodesWithMostFree)
	if s.NodesWithMostFree == 1 {
		on = "1 node"
	}
	return prefix + fmt.Sprintf("%s matching devices, none has %s free (most: %d, on %s)", nodesHave(s.NodesWithMatching), need, s.MostFree, on)
}

// TogetherNote is the reason of a Shortage that is Together.
const TogetherNote = "every request has nodes with enough free matching devices by count, yet no node could allocate the claims: " +
	"taints, shared counters, consumable capacity, constraints or requests competing for the same devices stand in the way " +
	"(kubectl dra describe pod says which)"

func nodesHave(n int) string {
	if n == 1 {
		return "1 node has"
	}
	return fmt.Sprintf("%d nodes have", n)
}

// FindShortage returns the first request of the claims that no node of
// nodes has enough free devices for, counted from the view as pruning
// counts them (devices in use but withheld count as free: Filter explains
// those; only each pool's newest generation counts), with each device
// matched against the class and the request's selectors. When every
// request has a node, the Shortage is Together (the claims fail together,
// or for what counting cannot see: taints, counters, capacity,
// constraints), as long as a request was counted and every class is known;
// ok is false otherwise. A prioritized list is short when every
// alternative is, and is named by its first; admin access (which may use
// devices in use) is never short. One pass over the view's devices per
// alternative.
func FindShortage(ctx context.Context, claims []*resourceapi.ResourceClaim, classes ClassGetter, view View, nodes []*v1.Node) (Shortage, bool) {
	newest := newestGenerations(view.Slices)
	allowed := sets.New[string]()
	for _, node := range nodes {
		allowed.Insert(node.Name)
	}
	counted, classMissing := 0, false
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil && request.Exactly.AdminAccess != nil && *request.Exactly.AdminAccess {
				// Admin access may use devices in use.
				continue
			}
			counted++
			var first *Shortage
			met := false
			for _, alt := range alternatives(request) {
				class, err := classes(alt.className)
				if err != nil || class == nil {
					met, classMissing = true, true // upstream's refusal names the class
					break
				}
				s, enough := countShortage(ctx, class, alt, view, newest, nodes, allowed)
				if enough > 0 {
					met = true
					break
				}
				if first == nil {
					s.Claim, s.Request, s.Class, s.Count = klog.KObj(claim).String(), request.Name, class.Name, alt.count
					first = &s
				}
			}
			if !met && first != nil {
				return *first, true
			}
		}
	}
	if counted == 0 || classMissing {
		return Shortage{}, false
	}
	return Shortage{Together: true}, true
}

// alternative is what a request, or one alternative of a prioritized
// list, asks: a class, selectors, and a count (0 for all).
type alternative struct {
	className string
	selectors []resourceapi.DeviceSelector
	count     int
}

func alternatives(request resourceapi.DeviceRequest) []alternative {
	count := func(mode resourceapi.DeviceAllocationMode, n int64) int {
		if mode == resourceapi.DeviceAllocationModeAll {
			return 0
		}
		return int(max(n, 1))
	}
	if request.Exactly != nil {
		x := request.Exactly
		return []alternative{{x.DeviceClassName, x.Selectors, count(x.AllocationMode, x.Count)}}
	}
	var out []alternative
	for _, sub := range request.FirstAvailable {
		out = append(out, alternative{sub.DeviceClassName, sub.Selectors, count(sub.AllocationMode, sub.Count)})
	}
	return out
}

// newestGenerations is each pool's newest generation among the slices:
// the allocator reads only those.
func newestGenerations(listed []*resourceapi.ResourceSlice) map[[2]string]int64 {
	newest := map[[2]string]int64{}
	for _, slice := range listed {
		key := [2]string{slice.Spec.Driver, slice.Spec.Pool.Name}
		if g, ok := newest[key]; !ok || slice.Spec.Pool.Generation > g {
			newest[key] = slice.Spec.Pool.Generation
		}
	}
	return newest
}

// countShortage counts, node by node, the devices that match and those
// free, and the nodes with enough free (every matching one, for count 0).
func countShortage(ctx context.Context, class *resourceapi.DeviceClass, alt alternative, view View, newest map[[2]string]int64, nodes []*v1.Node, allowed sets.Set[string]) (Shortage, int) {
	selectors, count := alt.selectors, alt.count
	matching, free := map[string]int{}, map[string]int{}
	// A class that names only a driver needs no CEL per device.
	driver, byDriver := deviceclass.Driver(class)
	byDriver = byDriver && len(class.Spec.Selectors) == 1
	add := func(nodes []string, isFree bool) {
		for _, node := range nodes {
			matching[node]++
			if isFree {
				free[node]++
			}
		}
	}
	for _, slice := range view.Slices {
		if byDriver && slice.Spec.Driver != driver {
			continue
		}
		if slice.Spec.Pool.Generation != newest[[2]string{slice.Spec.Driver, slice.Spec.Pool.Name}] {
			continue
		}
		perDevice := slice.Spec.PerDeviceNodeSelection != nil && *slice.Spec.PerDeviceNodeSelection
		var sliceReach []string
		if !perDevice {
			// Once per slice: its node selector is compiled and matched
			// once, not for each device.
			sliceReach = reachedBy(slice.Spec.NodeName, slice.Spec.NodeSelector, slice.Spec.AllNodes, nodes, allowed)
			if len(sliceReach) == 0 {
				continue
			}
		}
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			if (!byDriver && !deviceclass.Accepts(ctx, class, slice.Spec.Driver, device)) || !deviceclass.SelectorsAccept(ctx, selectors, slice.Spec.Driver, device) {
				continue
			}
			id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
			isFree := !view.InUse.Has(id) || view.Withheld.Has(id)
			if perDevice {
				add(reachedBy(device.NodeName, device.NodeSelector, device.AllNodes, nodes, allowed), isFree)
			} else {
				add(sliceReach, isFree)
			}
		}
	}
	var s Shortage
	enough := 0
	for node, n := range matching {
		s.NodesWithMatching++
		f := free[node]
		if (count == 0 && f == n) || (count > 0 && f >= count) {
			enough++
		}
		switch {
		case f > s.MostFree:
			s.MostFree, s.NodesWithMostFree = f, 1
		case f == s.MostFree && f > 0:
			s.NodesWithMostFree++
		}
	}
	return s, enough
}

// reachedBy are the names of the nodes (allowed holds their names) that a
// device with this node name, selector or all-nodes flag reaches.
func reachedBy(nodeName *string, selector *v1.NodeSelector, allNodes *bool, nodes []*v1.Node, allowed sets.Set[string]) []string {
	switch {
	case nodeName != nil && *nodeName != "":
		if allowed.Has(*nodeName) {
			return []string{*nodeName}
		}
		return nil
	case allNodes != nil && *allNodes:
		names := make([]string, 0, len(nodes))
		for _, node := range nodes {
			names = append(names, node.Name)
		}
		return names
	case selector != nil:
		matcher, err := nodeaffinity.NewNodeSelector(selector)
		if err != nil {
			return nil
		}
		var names []string
		for _, node := range nodes {
			if matcher.Match(node) {
				names = append(names, node.Name)
			}
		}
		return names
	}
	return nil
}

// Shortages remembers each pending pod's last Shortage for ShortageTTL, so
// that a pod refused again and again on a full cluster (every backoff, every
// event) pays for the count once in a while, not at every refusal; its
// message is then up to ShortageTTL old. It holds at most MaxShortages pods:
// a full map drops the expired entries, then any. Safe for concurrent use.
type Shortages struct {
	mu    sync.Mutex
	byPod map[types.UID]shortageEntry
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

const (
	// ShortageTTL is how long a pod's shortage is reused.
	ShortageTTL = 10 * time.Second
	// MaxShortages bounds the pods remembered.
	MaxShortages = 1024
)

type shortageEntry struct {
	reason  string
	expires time.Time
}

// Reason returns the pod's remembered reason, or computes, remembers and
// returns it; "" when compute finds no request short.
func (s *Shortages) Reason(pod types.UID, compute func() (Shortage, bool)) string {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	if e, ok := s.byPod[pod]; ok && now.Before(e.expires) {
		s.mu.Unlock()
		return e.reason
	}
	s.mu.Unlock()
	reason := ""
	if shortage, ok := compute(); ok {
		reason = shortage.String()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byPod == nil {
		s.byPod = map[types.UID]shortageEntry{}
	}
	if len(s.byPod) >= MaxShortages {
		for uid, e := range s.byPod {
			if !now.Before(e.expires) {
				delete(s.byPod, uid)
			}
		}
		for uid := range s.byPod {
			if len(s.byPod) < MaxShortages {
				break
			}
			delete(s.byPod, uid)
		}
	}
	s.byPod[pod] = shortageEntry{reason: reason, expires: now.Add(ShortageTTL)}
	return reason
}

// Len is how many pods are remembered.
func (s *Shortages) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byPod)
}
