package nodeprune

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
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

func nodesHave(n int) string {
	if n == 1 {
		return "1 node has"
	}
	return fmt.Sprintf("%d nodes have", n)
}

// FindShortage returns the first request of the claims that no node has
// enough free devices for, counted from the view as pruning counts them
// (devices in use but withheld count as free: Filter explains those), with
// each device matched against the class and the request's selectors; ok is
// false when every request has a node (the claims fail together, or for
// what counting cannot see: counters, capacity, constraints). A prioritized
// list is judged by its first alternative. One pass over the view's
// devices per request.
func FindShortage(ctx context.Context, claims []*resourceapi.ResourceClaim, classes ClassGetter, view View, nodes []*v1.Node) (Shortage, bool) {
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			class, selectors, count, ok := firstAlternative(request, classes)
			if !ok {
				continue
			}
			s, enough := countShortage(ctx, class, selectors, count, view, nodes)
			if enough > 0 {
				continue
			}
			s.Claim, s.Request, s.Class, s.Count = klog.KObj(claim).String(), request.Name, class.Name, count
			return s, true
		}
	}
	return Shortage{}, false
}

// firstAlternative is what a request asks first: its class, selectors and
// count (0 for all).
func firstAlternative(request resourceapi.DeviceRequest, classes ClassGetter) (*resourceapi.DeviceClass, []resourceapi.DeviceSelector, int, bool) {
	var className string
	var selectors []resourceapi.DeviceSelector
	var mode resourceapi.DeviceAllocationMode
	var count int64
	switch {
	case request.Exactly != nil:
		className, selectors, mode, count = request.Exactly.DeviceClassName, request.Exactly.Selectors, request.Exactly.AllocationMode, request.Exactly.Count
	case len(request.FirstAvailable) > 0:
		sub := request.FirstAvailable[0]
		className, selectors, mode, count = sub.DeviceClassName, sub.Selectors, sub.AllocationMode, sub.Count
	default:
		return nil, nil, 0, false
	}
	class, err := classes(className)
	if err != nil || class == nil {
		return nil, nil, 0, false
	}
	n := int(max(count, 1))
	if mode == resourceapi.DeviceAllocationModeAll {
		n = 0
	}
	return class, selectors, n, true
}

// countShortage counts, node by node, the devices that match and those
// free, and the nodes with enough free (every matching one, for count 0).
func countShortage(ctx context.Context, class *resourceapi.DeviceClass, selectors []resourceapi.DeviceSelector, count int, view View, nodes []*v1.Node) (Shortage, int) {
	matching, free := map[string]int{}, map[string]int{}
	driver, driverOnly := deviceclass.Driver(class)
	add := func(node string, isFree bool) {
		matching[node]++
		if isFree {
			free[node]++
		}
	}
	for _, slice := range view.Slices {
		if driverOnly && len(class.Spec.Selectors) == 1 && slice.Spec.Driver != driver {
			continue
		}
		perDevice := slice.Spec.PerDeviceNodeSelection != nil && *slice.Spec.PerDeviceNodeSelection
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			accepted := (driverOnly && len(class.Spec.Selectors) == 1 && slice.Spec.Driver == driver) || deviceclass.Accepts(ctx, class, slice.Spec.Driver, device)
			if !accepted || !deviceclass.SelectorsAccept(ctx, selectors, slice.Spec.Driver, device) {
				continue
			}
			id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
			isFree := !view.InUse.Has(id) || view.Withheld.Has(id)
			nodeName, selector, allNodes := slice.Spec.NodeName, slice.Spec.NodeSelector, slice.Spec.AllNodes
			if perDevice {
				nodeName, selector, allNodes = device.NodeName, device.NodeSelector, device.AllNodes
			}
			for _, node := range reachedBy(nodeName, selector, allNodes, nodes) {
				add(node, isFree)
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

// reachedBy are the names of the nodes a device with this node name,
// selector or all-nodes flag reaches.
func reachedBy(nodeName *string, selector *v1.NodeSelector, allNodes *bool, nodes []*v1.Node) []string {
	switch {
	case nodeName != nil && *nodeName != "":
		return []string{*nodeName}
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
