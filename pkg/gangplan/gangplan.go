// Package gangplan finds nodes and devices for every member of a gang at
// once.
//
// Upstream's scheduler places a gang's members one after another, and its
// allocator picks each member's devices without looking ahead: a member's
// first choice can leave a later member nothing, although other choices
// would place them all (kubernetes/kubernetes#138765). The allocator itself
// backtracks, but only within one call: asked for several claims together,
// it tries other devices for an earlier claim when a later one does not
// fit. Plan asks it for several members' claims together, node by node, so
// that the members sharing a node get devices that fit all of them.
//
// The search is greedy across nodes: each node takes as many of the
// members still unplaced as fit on it together, in the members' order. It
// finds a plan whenever the members can share nodes in that order, which
// covers gangs of identical members; it can miss a plan that needs a
// particular split of unlike members across nodes. Devices of pools that
// are not tied to one node, planned for a member on one node, are in use
// for the members planned on later nodes.
package gangplan

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/pkg/dryrun"
)

// Member is a pod of the gang and the claims it still needs allocated.
type Member struct {
	Pod    *v1.Pod
	Claims []*resourceapi.ResourceClaim
}

// Placement is where a member goes: its node, and the devices its claims
// get there.
type Placement struct {
	Node    string
	Devices sets.Set[structured.DeviceID]
}

// ErrBudget says the search ran out of allocator runs, or of time, before
// it placed every member.
var ErrBudget = errors.New("gang plan: allocator budget used up")

// Plan returns a placement for every member with claims, by pod UID, or
// nil when the members do not all fit on nodes in this cycle. Members
// without claims need no devices and get no placement. budget bounds the
// allocator runs (each node that reaches devices needs about log2 of the
// members unplaced that could fit there) and ctx's deadline their time;
// when either runs out, Plan returns ErrBudget. A node is never asked for
// more members than dryrun.Node.MayFit allows, so no run searches for a
// prefix whose device count alone cannot fit; a run that times out counts
// as not fitting. A node is
// tried for a member only if it is schedulable, its NoSchedule and
// NoExecute taints are tolerated and its labels meet the member's required
// node affinity; everything else a node must offer besides devices is left
// to the scheduler's own filters.
func Plan(ctx context.Context, cycle *dryrun.Cycle, nodes []*v1.Node, members []Member, budget int) (map[types.UID]Placement, error) {
	placements := make(map[types.UID]Placement, len(members))
	var remaining []Member
	for _, m := range members {
		if len(m.Claims) > 0 {
			remaining = append(remaining, m)
		}
	}
	// What earlier nodes got: a network pool's devices among them are
	// taken on every later node.
	var planned []resourceapi.AllocationResult
	for _, node := range nodes {
		if len(remaining) == 0 {
			break
		}
		eligible, rest := splitEligible(remaining, node)
		if len(eligible) == 0 {
			continue
		}
		n := cycle.Node(node)
		if !n.HasDevices() {
			continue
		}
		for i := range planned {
			n.Take(&planned[i])
		}
		// Whether a prefix of the members fits is monotone in its length:
		// find the longest that fits by bisection.
		fits, best := 0, [][]resourceapi.AllocationResult(nil)
		lo, hi := 1, mostThatMayFit(n, eligible)
		for lo <= hi {
			if budget <= 0 || ctx.Err() != nil {
				return nil, ErrBudget
			}
			budget--
			k := (lo + hi) / 2
			results, err := n.Allocate(ctx, claimsOf(eligible[:k]))
			switch {
			case errors.Is(err, dryrun.ErrTimedOut):
				if ctx.Err() != nil {
					return nil, ErrBudget
				}
			case err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode):
				return nil, err
			}
			if results == nil {
				hi = k - 1
				continue
			}
			fits, best, lo = k, split(results, eligible[:k]), k+1
		}
		for i, member := range eligible[:fits] {
			placements[member.Pod.UID] = Placement{Node: node.Name, Devices: devicesOf(best[i])}
			planned = append(planned, best[i]...)
		}
		remaining = append(rest, eligible[fits:]...)
	}
	if len(remaining) > 0 {
		return nil, nil
	}
	return placements, nil
}

// mostThatMayFit is the longest prefix of the members whose claims
// together MayFit the node; what MayFit counts only grows with the
// prefix, so bisection finds it.
func mostThatMayFit(n *dryrun.Node, members []Member) int {
	lo, hi := 0, len(members)
	for lo < hi {
		k := (lo + hi + 1) / 2
		if n.MayFit(claimsOf(members[:k])) {
			lo = k
		} else {
			hi = k - 1
		}
	}
	return lo
}

// splitEligible separates the members the node may take, in order, from
// the others.
func splitEligible(members []Member, node *v1.Node) (eligible, rest []Member) {
	for _, m := range members {
		if mayRunOn(m.Pod, node) {
			eligible = append(eligible, m)
		} else {
			rest = append(rest, m)
		}
	}
	return eligible, rest
}

// mayRunOn checks what upstream's NodeUnschedulable, TaintToleration and
// NodeAffinity filters check of a node's spec and labels, with upstream's
// helpers.
func mayRunOn(pod *v1.Pod, node *v1.Node) bool {
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}, false) {
		return false
	}
	hard := func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, hard, false); untolerated {
		return false
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	return err == nil && ok
}

func claimsOf(members []Member) []*resourceapi.ResourceClaim {
	var claims []*resourceapi.ResourceClaim
	for _, m := range members {
		claims = append(claims, m.Claims...)
	}
	return claims
}

// split hands each member the results of its own claims, which the
// allocator returns in the order of the claims it was given.
func split(results []resourceapi.AllocationResult, members []Member) [][]resourceapi.AllocationResult {
	out := make([][]resourceapi.AllocationResult, len(members))
	for i, m := range members {
		out[i], results = results[:len(m.Claims)], results[len(m.Claims):]
	}
	return out
}

func devicesOf(results []resourceapi.AllocationResult) sets.Set[structured.DeviceID] {
	devices := sets.New[structured.DeviceID]()
	for _, result := range results {
		for _, device := range result.Devices.Results {
			devices.Insert(structured.MakeDeviceID(device.Driver, device.Pool, device.Device))
		}
	}
	return devices
}
