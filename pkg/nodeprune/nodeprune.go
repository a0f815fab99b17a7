// Package nodeprune narrows the nodes a pod's device requests could be
// satisfied on, before Filter runs the allocator on each: on a nearly full
// cluster only the few nodes that reach a device not in use can take a pod,
// and the allocator's per-node check on every other node is wasted work
// (upstream's DynamicResources runs it on all of them).
//
// The answer is conservative by construction: a node is left out only when,
// for some request, no device the node can reach is free, of a driver the
// request's device class can select. It may keep a node that cannot fit
// (counters used up, capacity shared out, taints, selectors other than the
// driver, a request needing several devices), never drop one that can; the
// differential test checks that against upstream's allocator.
package nodeprune

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/deviceclass"
)

// View is the in-use state and the slices one scheduling cycle's allocator
// was built from.
type View struct {
	Slices []*resourceapi.ResourceSlice
	// InUse are the devices the allocator treats as allocated, withheld
	// ones included.
	InUse sets.Set[structured.DeviceID]
	// Withheld are the devices in InUse only because they are withheld as
	// Unhealthy: they count as free here, so that Filter still runs on
	// their nodes and explains them.
	Withheld sets.Set[structured.DeviceID]
	// Kept are the devices in InUse for no claim: released allocations
	// held (pkg/releasehold) and the withheld ones. Only Index reads it.
	Kept sets.Set[structured.DeviceID]
	// InFlight, when set, reports whether the claim tracker holds an
	// in-flight allocation for a claim. Only Index reads it.
	InFlight func(uid types.UID) bool
	// IDs, when set, caches the slices' device IDs across calls.
	IDs *DeviceIDs
}

// ClassGetter looks up a DeviceClass by name.
type ClassGetter func(name string) (*resourceapi.DeviceClass, error)

// need is what one request needs of a node: a free device of one of
// drivers, or of any driver when anyDriver.
type need struct {
	anyDriver bool
	drivers   sets.Set[string]
}

func (n need) accepts(driver string) bool { return n.anyDriver || n.drivers.Has(driver) }

// maxNeeds bounds the requests tracked per node (one bit each).
const maxNeeds = 64

// Candidates returns the nodes that could satisfy the claims' requests, or
// all=true when every node could or it cannot tell: a claim already
// allocated, an admin-access request (it may use devices in use), a class
// that does not exist, more than 64 requests.
func Candidates(claims []*resourceapi.ResourceClaim, classes ClassGetter, view View, nodes []*v1.Node) (names sets.Set[string], all bool) {
	needs, ok := needsOf(claims, classes)
	if !ok || len(needs) == 0 || len(needs) > maxNeeds {
		return nil, true
	}
	full := uint64(1)<<len(needs) - 1
	if len(needs) == maxNeeds {
		full = ^uint64(0)
	}

	// met[node]: the needs a free device the node reaches meets;
	// everywhere: those met by devices every node reaches.
	met := make(map[string]uint64, len(nodes))
	var everywhere uint64
	view.IDs.Begin()
	defer view.IDs.End()
	for _, slice := range view.Slices {
		sliceMeets := meets(needs, slice.Spec.Driver)
		if sliceMeets == 0 {
			continue
		}
		perDevice := slice.Spec.PerDeviceNodeSelection != nil && *slice.Spec.PerDeviceNodeSelection
		if !perDevice && everywhere&sliceMeets == sliceMeets && slice.Spec.AllNodes != nil && *slice.Spec.AllNodes {
			continue
		}
		if !perDevice && slice.Spec.NodeName != nil && met[*slice.Spec.NodeName]&sliceMeets == sliceMeets {
			continue
		}
		// Interned once per slice (DeviceIDs): interning every device's
		// names cost a millisecond per pod at 5000 devices.
		reachFree(met, &everywhere, nodes, slice, view.IDs.Of(slice, makeIDs), view, sliceMeets)
		if everywhere == full {
			return nil, true
		}
	}

	// Count first: most often every node qualifies (a cluster that is not
	// full), and then no set of names is needed.
	qualify := 0
	for _, node := range nodes {
		if (met[node.Name]|everywhere)&full == full {
			qualify++
		}
	}
	if qualify == len(nodes) {
		return nil, true
	}
	names = sets.New[string]()
	for _, node := range nodes {
		if (met[node.Name]|everywhere)&full == full {
			names.Insert(node.Name)
		}
	}
	return names, false
}

// meets is the bit set of needs a device of driver meets.
func meets(needs []need, driver string) uint64 {
	var bits uint64
	for i, n := range needs {
		if n.accepts(driver) {
			bits |= 1 << i
		}
	}
	return bits
}

// reachFree records the nodes the slice's free devices reach (ids are
// its devices' IDs): each device's own when the slice selects per device,
// else the slice's, which one free device is enough to tell.
func reachFree(met map[string]uint64, everywhere *uint64, nodes []*v1.Node, slice *resourceapi.ResourceSlice, ids []structured.DeviceID, view View, bits uint64) {
	perDevice := slice.Spec.PerDeviceNodeSelection != nil && *slice.Spec.PerDeviceNodeSelection
	for i := range slice.Spec.Devices {
		if view.InUse.Has(ids[i]) && !view.Withheld.Has(ids[i]) {
			continue
		}
		if !perDevice {
			reach(met, everywhere, nodes, slice.Spec.NodeName, slice.Spec.NodeSelector, slice.Spec.AllNodes, bits)
			return
		}
		device := &slice.Spec.Devices[i]
		reach(met, everywhere, nodes, device.NodeName, device.NodeSelector, device.AllNodes, bits)
	}
}

// reach records that a free device meeting bits is reachable from the
// nodes its node name, selector or all-nodes flag names.
func reach(met map[string]uint64, everywhere *uint64, nodes []*v1.Node, nodeName *string, selector *v1.NodeSelector, allNodes *bool, bits uint64) {
	switch {
	case nodeName != nil && *nodeName != "":
		met[*nodeName] |= bits
	case allNodes != nil && *allNodes:
		*everywhere |= bits
	case selector != nil:
		matcher, err := nodeaffinity.NewNodeSelector(selector)
		if err != nil {
			// The allocator refuses such a device; counting it free only
			// keeps nodes.
			*everywhere |= bits
			return
		}
		for _, node := range nodes {
			if matcher.Match(node) {
				met[node.Name] |= bits
			}
		}
	}
}

// needsOf is one need per request: each needs at least one device it may
// use, allocation mode All included (upstream's allocator requires one).
// ok is false when the claims cannot be pruned for.
func needsOf(claims []*resourceapi.ResourceClaim, classes ClassGetter) (needs []need, ok bool) {
	for _, claim := range claims {
		if claim.Status.Allocation != nil {
			return nil, false
		}
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil:
				if request.Exactly.AdminAccess != nil && *request.Exactly.AdminAccess {
					return nil, false
				}
				n, ok := classNeed(request.Exactly.DeviceClassName, classes)
				if !ok {
					return nil, false
				}
				needs = append(needs, n)
			case len(request.FirstAvailable) > 0:
				combined := need{drivers: sets.New[string]()}
				for _, sub := range request.FirstAvailable {
					n, ok := classNeed(sub.DeviceClassName, classes)
					if !ok {
						return nil, false
					}
					combined.anyDriver = combined.anyDriver || n.anyDriver
					combined.drivers = combined.drivers.Union(n.drivers)
				}
				needs = append(needs, combined)
			default:
				return nil, false
			}
		}
	}
	return needs, true
}

// classNeed is what a request of the class needs: a device of the driver
// one of its selectors names, where a selector is exactly that; a device of
// any driver otherwise.
func classNeed(name string, classes ClassGetter) (need, bool) {
	class, err := classes(name)
	if err != nil || class == nil {
		return need{}, false
	}
	if driver, ok := deviceclass.Driver(class); ok {
		return need{drivers: sets.New(driver)}, true
	}
	return need{anyDriver: true}, true
}
