// Package withheld explains the devices DRAScope withholds because kubelet
// reported them Unhealthy (KEP-4680, deviceHealth.policy Avoid): which of
// them a pending pod could have used, on which nodes, in a message whose
// size does not grow with the cluster. Withholding itself is the decorated
// DRA manager's (pkg/dramanager, manager.go: the devices join the
// in-use set the allocator reads); this package only says so, and knows
// nothing of the scheduler framework.
package withheld

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/poolcache"
)

// MaxInMessage bounds how many withheld devices a pending pod's message
// names; the rest are counted.
const MaxInMessage = 3

// Reason is how Filter refuses a node that reaches withheld devices. It is
// the same for every node, so that the scheduler's message counts the
// nodes ("37 had devices withheld ...") rather than listing each:
// upstream's FitError names every distinct reason, and a reason naming
// each node's own devices would grow the pod's status with the cluster.
// PostFilter names a few of the devices, once (Cycle.Note).
const Reason = "had devices withheld because kubelet reported them Unhealthy"

// Source is where the withheld devices and what they are come from: the
// scheduler's health cache, its side cache of pools, and the device
// classes.
type Source struct {
	Health  *health.Cache
	Pools   *poolcache.Cache
	Classes resourcelisters.DeviceClassLister
}

// Cycle is the Unhealthy devices as one scheduling cycle sees them, those
// the pod's claims could use, grouped by the node that reports them.
// Filter runs for every node, and a pod that does not fit is refused by
// most of them: scanning every Unhealthy device for each refusal cost a
// fifth of the test process's CPU in scheduler_perf's UnhealthyDevices
// workload (docs/perf.md). The grouping is made once, at the cycle's first
// question; Filter runs in parallel, hence the sync.Once.
type Cycle struct {
	// toAllocate are the pod's claims still to allocate; known is false
	// when they are not known, and then every withheld device is named.
	toAllocate []*resourceapi.ResourceClaim
	known      bool

	once sync.Once
	// byNode are the node-local devices; anyNode those of pools not tied
	// to one node, which every node can reach. Each is sorted by device.
	byNode  map[string][]health.Report
	anyNode []health.Report
}

// NewCycle starts a cycle's view for a pod whose claims still to allocate
// are toAllocate; known is false when the pod's claims could not all be
// read.
func NewCycle(toAllocate []*resourceapi.ResourceClaim, known bool) *Cycle {
	return &Cycle{toAllocate: toAllocate, known: known}
}

// Reaches reports whether the node reaches withheld devices the pod could
// use: Filter then adds Reason to its refusal.
func (c *Cycle) Reaches(ctx context.Context, src Source, node string) bool {
	c.group(ctx, src)
	return len(c.byNode[node]) > 0 || len(c.anyNode) > 0
}

// ReportingNodes are the nodes that report withheld devices the pod could
// use, and whether devices of pools not tied to one node are among them
// (any node reaches those).
func (c *Cycle) ReportingNodes(ctx context.Context, src Source) (nodes []string, anyNode bool) {
	c.group(ctx, src)
	for name := range c.byNode {
		nodes = append(nodes, name)
	}
	return nodes, len(c.anyNode) > 0
}

// Note describes the Unhealthy devices the nodes can reach (those reported
// from them, and those of pools not tied to one node) and that a device
// class the pod asks for accepts: a pod waiting for a NIC is not told
// about a withheld GPU. It names at most MaxInMessage and counts the rest.
// The note lands in the pod's status and events: it names a reporting pod
// only of namespace, the pending pod's own.
func (c *Cycle) Note(ctx context.Context, src Source, namespace string, nodes ...string) string {
	reachable := c.reachable(ctx, src, nodes...)
	if len(reachable) == 0 {
		return ""
	}
	parts := make([]string, 0, MaxInMessage+1)
	for i, r := range reachable {
		if i == MaxInMessage {
			parts = append(parts, fmt.Sprintf("and %d more", len(reachable)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", r.Device, r.DetailFor(namespace)))
	}
	return "devices withheld because kubelet reported them Unhealthy: " + strings.Join(parts, ", ")
}

// reachable returns, sorted, the withheld devices the nodes reach that the
// pod's classes accept.
func (c *Cycle) reachable(ctx context.Context, src Source, nodes ...string) []health.Report {
	c.group(ctx, src)
	if len(nodes) == 0 {
		return nil
	}
	if len(nodes) == 1 && len(c.anyNode) == 0 {
		return c.byNode[nodes[0]]
	}
	var reachable []health.Report
	for _, name := range nodes {
		reachable = append(reachable, c.byNode[name]...)
	}
	reachable = append(reachable, c.anyNode...)
	slices.SortFunc(reachable, byDevice)
	return reachable
}

// group sorts the withheld devices the pod's classes accept by the node
// that reports them, at the cycle's first call.
func (c *Cycle) group(ctx context.Context, src Source) {
	c.once.Do(func() {
		c.byNode = map[string][]health.Report{}
		classes := c.requestedClasses(src.Classes)
		devices := poolDevices{}
		for _, r := range src.Health.Unhealthy() {
			if classes != nil && (len(classes) == 0 || !devices.anyAccepts(ctx, src.Pools, classes, r.Device)) {
				continue
			}
			if networkAttached(src.Pools, r.Device) {
				c.anyNode = append(c.anyNode, r)
			} else {
				c.byNode[r.Node] = append(c.byNode[r.Node], r)
			}
		}
		slices.SortFunc(c.anyNode, byDevice)
		for _, reports := range c.byNode {
			slices.SortFunc(reports, byDevice)
		}
	})
}

// requestedClasses are the device classes the claims' requests name, every
// alternative of a prioritized list included: empty when no claim is left
// to allocate, and then no withheld device concerns the pod; nil when that
// is not known (claims that could not be read, a class not found), and
// then none is left out.
func (c *Cycle) requestedClasses(lister resourcelisters.DeviceClassLister) []*resourceapi.DeviceClass {
	if !c.known || lister == nil {
		return nil
	}
	classes := []*resourceapi.DeviceClass{}
	add := func(name string) bool {
		class, err := lister.Get(name)
		if err != nil {
			return false
		}
		classes = append(classes, class)
		return true
	}
	for _, claim := range c.toAllocate {
		for _, request := range claim.Spec.Devices.Requests {
			if request.Exactly != nil && !add(request.Exactly.DeviceClassName) {
				return nil
			}
			for _, sub := range request.FirstAvailable {
				if !add(sub.DeviceClassName) {
					return nil
				}
			}
		}
	}
	return classes
}

// poolDevices are the devices of the pools one cycle looked up, by name, as
// the side cache's slices of the pool's generation publish them: the
// Unhealthy devices of a pool share one lookup.
type poolDevices map[drausage.PoolID]map[string]*resourceapi.Device

// anyAccepts reports whether one of the classes accepts the device; true
// when the device is not in the side cache.
func (p poolDevices) anyAccepts(ctx context.Context, pools *poolcache.Cache, classes []*resourceapi.DeviceClass, d health.Device) bool {
	id := drausage.PoolID{Driver: d.Driver, Pool: d.Pool}
	byName, ok := p[id]
	if !ok {
		byName = map[string]*resourceapi.Device{}
		if snap := pools.Get(id); snap != nil {
			for _, slice := range pools.Slices(id) {
				if slice.Spec.Pool.Generation != snap.Generation {
					continue
				}
				for i := range slice.Spec.Devices {
					byName[slice.Spec.Devices[i].Name] = &slice.Spec.Devices[i]
				}
			}
		}
		p[id] = byName
	}
	device, ok := byName[d.Name]
	if !ok {
		return true
	}
	for _, class := range classes {
		if deviceclass.Accepts(ctx, class, d.Driver, device) {
			return true
		}
	}
	return false
}

func byDevice(a, b health.Report) int {
	return a.Device.Compare(b.Device)
}

// networkAttached reports whether a device's pool is not tied to one node.
func networkAttached(pools *poolcache.Cache, d health.Device) bool {
	snap := pools.Get(drausage.PoolID{Driver: d.Driver, Pool: d.Pool})
	return snap != nil && snap.NodeName == ""
}
