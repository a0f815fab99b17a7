// Package dryrun answers the question a preemption dry run asks of DRA on
// one node: with these claims' devices freed (their pods are victims) and
// those taken (pods nominated to the node), can a pod's claims be allocated
// here?
//
// Upstream's DynamicResources cannot answer it: its allocator is built once
// per scheduling cycle over a fixed in-use set, and its cycle state is shared
// by every clone. A Cycle keeps that cycle's allocated state and slices,
// grouped by pool, so that one node's share is quick to copy; a Node is such
// a copy that can be changed and asked, running the public structured
// allocator over exactly the pools the node can reach. Freeing and taking
// follow upstream's counting (k8s.io/kubernetes/pkg/scheduler/framework/
// plugins/dynamicresources, foreachAllocatedDevice): admin-access results
// hold nothing, and with consumable capacity a result with a share ID holds
// a share and its capacity rather than the whole device.
package dryrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/allocated"
)

// Allocating is what the allocator needs besides the in-use state and the
// slices; the scheduler's, so a dry run answers as Filter would.
type Allocating struct {
	Features structured.Features
	Classes  structured.DeviceClassLister
	CEL      *cel.Cache
	// RunTimeout bounds each allocator run (DefaultRunTimeout when zero):
	// the allocator backtracks, and without a deadline a claim set that
	// cannot fit can keep it searching for hours.
	RunTimeout time.Duration
	// Observe, when set, is told how each run ended.
	Observe func(Outcome)
}

// DefaultRunTimeout is upstream's default Filter timeout
// (DynamicResourcesArgs.filterTimeout).
const DefaultRunTimeout = 10 * time.Second

// Outcome is how an allocator run ended.
type Outcome string

const (
	// Fit: the claims fit; the results are returned.
	Fit Outcome = "fit"
	// NoFit: the allocator searched and found no fit.
	NoFit Outcome = "nofit"
	// Infeasible: MayFit said no, and no search ran.
	Infeasible Outcome = "infeasible"
	// TimedOut: the run's or the caller's deadline ended the search.
	TimedOut Outcome = "timeout"
	// Failed: the allocator reported a problem (CEL, a missing class).
	Failed Outcome = "error"
)

// Budget is a wall-clock budget that the dry runs of one scheduling cycle
// share, however many nodes and clones of the cycle state they run for: it
// starts with the first run that asks for it. A nil Budget bounds nothing
// beyond the per-run timeout.
type Budget struct {
	total    time.Duration
	once     sync.Once
	deadline time.Time
}

// NewBudget returns a budget of total; nil, no budget, for a total that is
// not positive.
func NewBudget(total time.Duration) *Budget {
	if total <= 0 {
		return nil
	}
	return &Budget{total: total}
}

// Context returns ctx, ending at the budget's deadline.
func (b *Budget) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	if b == nil {
		return ctx, func() {}
	}
	b.once.Do(func() { b.deadline = time.Now().Add(b.total) })
	return context.WithDeadline(ctx, b.deadline)
}

// ErrTimedOut is returned for a run that its deadline, or its caller's,
// ended before it knew whether the claims fit.
var ErrTimedOut = fmt.Errorf("allocator run timed out: %w", context.DeadlineExceeded)

// Cycle is one scheduling cycle's allocated state and slices. It is only
// read after NewCycle, so nodes evaluated in parallel share it.
type Cycle struct {
	allocating Allocating
	state      structured.AllocatedState
	// kept are in use for no claim (withheld, or held until a release is
	// known): freeing a claim never frees them.
	kept   sets.Set[structured.DeviceID]
	slices []*resourceapi.ResourceSlice

	once    sync.Once
	byPool  map[pool][]*resourceapi.ResourceSlice
	byNode  map[string][]pool
	anyNode []pool
	// nodeOf is the node of each node-local pool.
	nodeOf map[pool]string
	inUse  map[pool][]structured.DeviceID
	shares map[pool][]structured.SharedDeviceID
}

type pool struct{ driver, name string }

func poolOf(id structured.DeviceID) pool {
	return pool{driver: id.Driver.String(), name: id.Pool.String()}
}

// NewCycle keeps state, kept and slices as they are: the caller must not
// change them afterwards.
func NewCycle(allocating Allocating, state structured.AllocatedState, kept sets.Set[structured.DeviceID], slices []*resourceapi.ResourceSlice) *Cycle {
	return &Cycle{allocating: allocating, state: state, kept: kept, slices: slices}
}

// index groups slices and in-use state by pool, once, when a dry run first
// needs a node.
func (c *Cycle) index() {
	c.once.Do(func() {
		c.byPool = map[pool][]*resourceapi.ResourceSlice{}
		c.byNode = map[string][]pool{}
		c.nodeOf = map[pool]string{}
		anyNode := sets.New[pool]()
		for _, slice := range c.slices {
			p := pool{driver: slice.Spec.Driver, name: slice.Spec.Pool.Name}
			c.byPool[p] = append(c.byPool[p], slice)
			if name := ptr.Deref(slice.Spec.NodeName, ""); name != "" {
				c.nodeOf[p] = name
				// A pool's slices on a node usually come together;
				// Node drops any repeat.
				if nodePools := c.byNode[name]; len(nodePools) == 0 || nodePools[len(nodePools)-1] != p {
					c.byNode[name] = append(nodePools, p)
				}
			} else {
				// All nodes, a node selector, per-device node selection, or
				// a slice of shared counters: the allocator decides.
				if !anyNode.Has(p) {
					anyNode.Insert(p)
					c.anyNode = append(c.anyNode, p)
				}
			}
		}
		c.inUse = map[pool][]structured.DeviceID{}
		for id := range c.state.AllocatedDevices {
			c.inUse[poolOf(id)] = append(c.inUse[poolOf(id)], id)
		}
		c.shares = map[pool][]structured.SharedDeviceID{}
		for id := range c.state.AllocatedSharedDeviceIDs {
			p := poolOf(id.GetDeviceID())
			c.shares[p] = append(c.shares[p], id)
		}
	})
}

// reaches reports whether a slice of a pool not tied to one node offers
// the node a device: the slice's all-nodes or node selector, or with
// per-device node selection, a device's.
func (c *Cycle) reaches(node *v1.Node, p pool) bool {
	matches := func(name *string, all *bool, selector *v1.NodeSelector) bool {
		ok, err := structured.NodeMatches(c.allocating.Features, node, ptr.Deref(name, ""), ptr.Deref(all, false), selector)
		return err == nil && ok
	}
	for _, slice := range c.byPool[p] {
		if !ptr.Deref(slice.Spec.PerDeviceNodeSelection, false) {
			if matches(slice.Spec.NodeName, slice.Spec.AllNodes, slice.Spec.NodeSelector) {
				return true
			}
			continue
		}
		for i := range slice.Spec.Devices {
			d := &slice.Spec.Devices[i]
			if matches(d.NodeName, d.AllNodes, d.NodeSelector) {
				return true
			}
		}
	}
	return false
}

// NodeOf returns the node of a node-local pool, "" for a pool not tied to
// one node or not in the cycle.
func (c *Cycle) NodeOf(driver, poolName string) string {
	c.index()
	return c.nodeOf[pool{driver: driver, name: poolName}]
}

// Node is a node's share of a Cycle that a dry run may change: the slices
// of the pools the node can reach and a copy of their in-use state. It is
// not safe for concurrent use.
type Node struct {
	cycle  *Cycle
	node   *v1.Node
	pools  sets.Set[pool]
	slices []*resourceapi.ResourceSlice
	state  structured.AllocatedState
	// network is whether a pool not tied to one node offers the node a
	// device.
	network bool
}

// Node copies the node's share of the cycle.
func (c *Cycle) Node(node *v1.Node) *Node {
	c.index()
	n := &Node{
		cycle: c,
		node:  node,
		pools: sets.New[pool](),
		state: structured.AllocatedState{
			AllocatedDevices:         sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
		},
	}
	for _, pools := range [][]pool{c.byNode[node.Name], c.anyNode} {
		for _, p := range pools {
			if n.pools.Has(p) {
				continue
			}
			n.pools.Insert(p)
			n.slices = append(n.slices, c.byPool[p]...)
			for _, id := range c.inUse[p] {
				n.state.AllocatedDevices.Insert(id)
			}
			for _, id := range c.shares[p] {
				n.state.AllocatedSharedDeviceIDs.Insert(id)
			}
		}
	}
	for _, p := range c.anyNode {
		if !n.network && c.reaches(node, p) {
			n.network = true
		}
	}
	for id, consumed := range c.state.AggregatedCapacity {
		if n.pools.Has(poolOf(id)) {
			n.state.AggregatedCapacity[id] = consumed.Clone()
		}
	}
	return n
}

// Free marks the devices an allocation holds as free, except those the
// cycle keeps in use for no claim, and reports whether any was in use.
// Devices of pools the node cannot reach are not part of the node's share
// and change nothing.
func (n *Node) Free(allocation *resourceapi.AllocationResult) bool {
	freed := false
	n.each(allocation, func(id structured.DeviceID) {
		if !n.cycle.kept.Has(id) && n.state.AllocatedDevices.Has(id) {
			n.state.AllocatedDevices.Delete(id)
			freed = true
		}
	}, func(id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity) {
		if !n.state.AllocatedSharedDeviceIDs.Has(id) {
			return
		}
		n.state.AllocatedSharedDeviceIDs.Delete(id)
		freed = true
		if consumed != nil {
			n.state.AggregatedCapacity.Remove(*consumed)
		}
	})
	return freed
}

// FreeAllBut marks as free every device of the node's share that is not in
// inUse (nor kept), and reports whether there was one: the devices
// released since the cycle began.
func (n *Node) FreeAllBut(inUse sets.Set[structured.DeviceID]) bool {
	freed := false
	for id := range n.state.AllocatedDevices {
		if !inUse.Has(id) && !n.cycle.kept.Has(id) {
			n.state.AllocatedDevices.Delete(id)
			freed = true
		}
	}
	return freed
}

// FreeKept marks as free the devices of ids the node's share holds in use,
// kept ones included: for a check that must not refuse a node for devices
// whose state Filter explains (those withheld as Unhealthy).
func (n *Node) FreeKept(ids sets.Set[structured.DeviceID]) {
	for id := range ids {
		n.state.AllocatedDevices.Delete(id)
	}
}

// Take marks the devices an allocation holds as in use.
func (n *Node) Take(allocation *resourceapi.AllocationResult) {
	n.each(allocation, func(id structured.DeviceID) {
		n.state.AllocatedDevices.Insert(id)
	}, func(id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity) {
		if n.state.AllocatedSharedDeviceIDs.Has(id) {
			return
		}
		n.state.AllocatedSharedDeviceIDs.Insert(id)
		if consumed != nil {
			n.state.AggregatedCapacity.Insert(*consumed)
		}
	})
}

func (n *Node) each(allocation *resourceapi.AllocationResult, dedicated func(structured.DeviceID), shared func(structured.SharedDeviceID, *structured.DeviceConsumedCapacity)) {
	// Only the node's pools: a network pool's devices held elsewhere are
	// in the state already.
	ours := func(result *resourceapi.DeviceRequestAllocationResult) bool {
		return n.pools.Has(pool{driver: result.Driver, name: result.Pool})
	}
	allocated.Each(allocation, n.cycle.allocating.Features.ConsumableCapacity, allocated.Visitor{
		Whole: func(result *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) {
			if ours(result) {
				dedicated(id)
			}
		},
		Share: func(result *resourceapi.DeviceRequestAllocationResult, id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity) {
			if ours(result) {
				shared(id, consumed)
			}
		},
	})
}

// HasDevices reports whether the node reaches any slice: a node that does
// not can hold no claim's devices.
func (n *Node) HasDevices() bool { return len(n.slices) > 0 }

// ReachesNetworkPools reports whether a pool not tied to one node (all
// nodes, a node selector, per-device node selection) offers the node a
// device: one that pods on other nodes may hold.
func (n *Node) ReachesNetworkPools() bool { return n.network }

// Allocate runs the allocator for claims on the node over the node's
// share as it is now, for at most the run timeout and never past ctx's
// deadline; claims MayFit refuses are not searched. It returns nil
// results, and the allocator's structured.ErrFailedAllocationOnNode or no
// error, when the claims do not fit; ErrTimedOut when the time ran out
// first; any other error is the allocator's (a CEL or class problem).
func (n *Node) Allocate(ctx context.Context, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	results, outcome, err := n.allocate(ctx, claims)
	if observe := n.cycle.allocating.Observe; observe != nil {
		observe(outcome)
	}
	return results, err
}

func (n *Node) allocate(ctx context.Context, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, Outcome, error) {
	if ctx.Err() != nil {
		return nil, TimedOut, ErrTimedOut
	}
	if !n.MayFit(claims) {
		return nil, Infeasible, nil
	}
	timeout := n.cycle.allocating.RunTimeout
	if timeout <= 0 {
		timeout = DefaultRunTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	allocator, err := structured.NewAllocator(ctx, n.cycle.allocating.Features, n.state, n.cycle.allocating.Classes, n.slices, n.cycle.allocating.CEL)
	if err != nil {
		return nil, Failed, err
	}
	results, err := allocator.Allocate(ctx, n.node, claims)
	switch {
	case ctx.Err() != nil:
		return nil, TimedOut, ErrTimedOut
	case err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode):
		return nil, Failed, err
	case err != nil || len(results) != len(claims):
		return nil, NoFit, err
	}
	return results, Fit, nil
}
