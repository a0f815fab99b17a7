package whypending

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/drausage"
)

// request is one request of a claim still to allocate: its alternatives
// (one for an exact request), each counted node by node.
type request struct {
	claim string
	name  string
	alts  []*alternative
}

// alternative is an exact request or one subrequest of a prioritized list.
type alternative struct {
	report *RequestReport
	// allMode: every matching device of the node is needed.
	allMode bool
	need    int
	// nodes counts, per node reaching a matching device, what it has.
	nodes map[string]*nodeCounts
}

// nodeCounts are one node's matching devices for an alternative, by state.
type nodeCounts struct {
	matching, free, allocated, tainted, unhealthy, counters, capacity int
}

// add counts one matching device in the state.
func (n *nodeCounts) add(state deviceState) {
	n.matching++
	switch state {
	case stateFree:
		n.free++
	case stateAllocated:
		n.allocated++
	case stateTainted:
		n.tainted++
	case stateUnhealthy:
		n.unhealthy++
	case stateCounters:
		n.counters++
	case stateCapacity:
		n.capacity++
	}
}

// needOn is what the node must have free.
func (a *alternative) needOn(n *nodeCounts) int {
	if a.allMode {
		return max(n.matching, 1)
	}
	return a.need
}

// meets reports whether the node has enough free devices.
func (a *alternative) meets(node string) bool {
	n, ok := a.nodes[node]
	return ok && n.free >= a.needOn(n)
}

// claim reports on one of the pod's claims, and counts, for a claim still
// to allocate, what the cluster has for each request.
func (e *explainer) claim(pc PodClaim) (ClaimReport, []*request) {
	cr := ClaimReport{Name: pc.Name, Missing: pc.Claim == nil && !pc.Hidden, Hidden: pc.Hidden}
	if pc.ResourceClaim != "" {
		cr.ResourceClaim = e.pod.Namespace + "/" + pc.ResourceClaim
	}
	if pc.Claim == nil {
		return cr, nil
	}
	claim := pc.Claim
	for _, c := range claim.Spec.Devices.Constraints {
		cr.Constraints = append(cr.Constraints, constraintString(c))
	}
	if claim.Status.Allocation != nil {
		cr.Allocated = true
		cr.AllocatedOn = e.allocatedOn(claim.Status.Allocation)
		for _, r := range claim.Spec.Devices.Requests {
			for _, alt := range alternativesOf(r) {
				cr.Requests = append(cr.Requests, *alt)
			}
		}
		return cr, nil
	}
	var requests []*request
	for _, r := range claim.Spec.Devices.Requests {
		req := &request{claim: klog.KObj(claim).String(), name: r.Name}
		for _, report := range alternativesOf(r) {
			req.alts = append(req.alts, e.count(report, r, claim))
		}
		if len(req.alts) == 0 {
			// A kind of request this client does not know.
			e.notes = append(e.notes, fmt.Sprintf("claim %s, request %s: of a kind this kubectl dra does not know", req.claim, r.Name))
			continue
		}
		requests = append(requests, req)
		for _, alt := range req.alts {
			cr.Requests = append(cr.Requests, *alt.report)
		}
	}
	return cr, requests
}

// alternativesOf describes an exact request, or each subrequest of a
// prioritized list.
func alternativesOf(r resourceapi.DeviceRequest) []*RequestReport {
	describe := func(name, class string, selectors []resourceapi.DeviceSelector, mode resourceapi.DeviceAllocationMode, count int64, admin bool, capacity *resourceapi.CapacityRequirements) *RequestReport {
		report := &RequestReport{Name: name, DeviceClass: class, AllocationMode: string(mode), AdminAccess: admin}
		if mode != resourceapi.DeviceAllocationModeAll {
			report.AllocationMode, report.Count = string(resourceapi.DeviceAllocationModeExactCount), max(count, 1)
		}
		for _, s := range selectors {
			if s.CEL != nil {
				report.Selectors = append(report.Selectors, truncate(s.CEL.Expression, MaxExpression))
			}
		}
		if capacity != nil {
			for _, name := range slices.Sorted(maps.Keys(capacity.Requests)) {
				q := capacity.Requests[name]
				report.Capacity = append(report.Capacity, fmt.Sprintf("%s=%s", name, q.String()))
			}
		}
		return report
	}
	if r.Exactly != nil {
		x := r.Exactly
		return []*RequestReport{describe(r.Name, x.DeviceClassName, x.Selectors, x.AllocationMode, x.Count, ptr.Deref(x.AdminAccess, false), x.Capacity)}
	}
	var out []*RequestReport
	for _, sub := range r.FirstAvailable {
		out = append(out, describe(r.Name+"/"+sub.Name, sub.DeviceClassName, sub.Selectors, sub.AllocationMode, sub.Count, false, sub.Capacity))
	}
	return out
}

// count counts, node by node, the devices of the cluster that match the
// alternative, by what keeps them from it.
func (e *explainer) count(report *RequestReport, r resourceapi.DeviceRequest, claim *resourceapi.ResourceClaim) *alternative {
	alt := &alternative{report: report, allMode: report.AllocationMode == string(resourceapi.DeviceAllocationModeAll), need: int(report.Count), nodes: map[string]*nodeCounts{}}
	v := &Verdict{Need: alt.need}
	report.Verdict = v
	if e.cluster.SlicesHidden || e.cluster.ClassesHidden {
		return alt
	}
	class, ok := e.cluster.Classes[report.DeviceClass]
	if !ok {
		v.ClassMissing = true
		return alt
	}
	selectors, tolerations, capacity := requestSelectors(r, report.Name)
	taints := sets.New[string]()
	var matching []*device
	for _, d := range e.devices {
		if e.ctx.Err() != nil {
			e.notes = append(e.notes, "the count of devices stopped at the deadline: the figures are partial")
			break
		}
		if deviceclass.Accepts(e.ctx, class, d.pool.Driver, d.spec) && deviceclass.SelectorsAccept(e.ctx, selectors, d.pool.Driver, d.spec) {
			matching = append(matching, d)
		}
	}
	// What keeps each matching device from the request, once per device.
	states, taintOf := make([]deviceState, len(matching)), make([]string, len(matching))
	for i, d := range matching {
		states[i], taintOf[i] = e.state(d, report.AdminAccess, tolerations, capacity)
	}
	// Devices count where a node the pod may run on reaches them.
	reached := make([]bool, len(matching))
	for _, node := range e.cluster.Nodes {
		for i, d := range matching {
			if !e.reaches(d, node) {
				continue
			}
			reached[i] = true
			n := alt.nodes[node.Name]
			if n == nil {
				n = &nodeCounts{}
				alt.nodes[node.Name] = n
			}
			n.add(states[i])
		}
	}
	for i, d := range matching {
		if !reached[i] {
			continue
		}
		v.Devices.Matching++
		switch states[i] {
		case stateFree:
			v.Devices.Free++
		case stateAllocated:
			v.Devices.Allocated++
			if e.lower != nil && len(d.usage.Allocations) > 0 && !slices.ContainsFunc(d.usage.Allocations, func(a drausage.Allocation) bool { return !e.lower(a.Claim) }) {
				v.Devices.HeldByLowerPriority++
			}
		case stateTainted:
			v.Devices.Tainted++
			taints.Insert(taintOf[i])
		case stateUnhealthy:
			v.Devices.Unhealthy++
		case stateCounters:
			v.Devices.CountersExhausted++
		case stateCapacity:
			v.Devices.CapacityExhausted++
		}
	}
	v.Taints = sets.List(taints)
	if len(v.Taints) > MaxTaints {
		v.Taints = append(v.Taints[:MaxTaints], fmt.Sprintf("and %d more", len(taints)-MaxTaints))
	}
	for _, n := range alt.nodes {
		v.NodesWithMatching++
		if n.free >= alt.needOn(n) {
			v.NodesWithEnough++
		}
		switch {
		case n.free > v.MostFree:
			v.MostFree, v.NodesWithMostFree = n.free, 1
		case n.free == v.MostFree && n.free > 0:
			v.NodesWithMostFree++
		}
	}
	return alt
}

// requestSelectors are the alternative's selectors, tolerations and
// capacity requests.
func requestSelectors(r resourceapi.DeviceRequest, name string) ([]resourceapi.DeviceSelector, []resourceapi.DeviceToleration, *resourceapi.CapacityRequirements) {
	if r.Exactly != nil {
		return r.Exactly.Selectors, r.Exactly.Tolerations, r.Exactly.Capacity
	}
	for _, sub := range r.FirstAvailable {
		if r.Name+"/"+sub.Name == name {
			return sub.Selectors, sub.Tolerations, sub.Capacity
		}
	}
	return nil, nil, nil
}

type deviceState int

const (
	stateFree deviceState = iota
	stateAllocated
	stateTainted
	stateUnhealthy
	stateCounters
	stateCapacity
)

// state is what keeps a matching device from a request, if anything.
// Admin access uses devices in use (withheld ones too: the scheduler
// withholds them through the in-use set) and, as DRAScope allocates it,
// without their shared counters; it still honours taints.
func (e *explainer) state(d *device, admin bool, tolerations []resourceapi.DeviceToleration, capacity *resourceapi.CapacityRequirements) (deviceState, string) {
	switch {
	case d.usage.State == drausage.DeviceAllocated && !admin:
		return stateAllocated, ""
	case d.usage.Reason == drausage.ReasonUnhealthy && !admin:
		return stateUnhealthy, ""
	}
	for _, t := range d.taints {
		if !tolerated([]resourceapi.DeviceTaint{t}, tolerations) {
			return stateTainted, taintString(t)
		}
	}
	if d.usage.Reason == drausage.ReasonCountersExhausted && !admin {
		return stateCounters, ""
	}
	if !admin && capacity != nil && shortOfCapacity(d.usage.Capacity, capacity) {
		return stateCapacity, ""
	}
	return stateFree, ""
}

// shortOfCapacity reports whether a shared device has less left of some
// capacity than the request asks (what a request that names no amount
// takes by the device's policy is the allocator's to say).
func shortOfCapacity(used []drausage.CapacityUse, capacity *resourceapi.CapacityRequirements) bool {
	for _, u := range used {
		want, ok := capacity.Requests[u.Name]
		if !ok {
			continue
		}
		left := u.Total.DeepCopy()
		left.Sub(u.Used)
		if left.Cmp(want) < 0 {
			return true
		}
	}
	return false
}

// allocatedOn are the nodes of the pools an allocation's devices are in;
// none for pools any node may reach.
func (e *explainer) allocatedOn(allocation *resourceapi.AllocationResult) []string {
	nodes := sets.New[string]()
	for _, result := range allocation.Devices.Results {
		if node := e.poolNode[drausage.PoolID{Driver: result.Driver, Pool: result.Pool}]; node != "" {
			nodes.Insert(node)
		}
	}
	return sets.List(nodes)
}

// meetingEvery returns the nodes where every request has an alternative
// with enough free devices, by name.
func (e *explainer) meetingEvery(requests []*request) []*v1.Node {
	var nodes []*v1.Node
	for _, node := range e.cluster.Nodes {
		if !slices.ContainsFunc(requests, func(r *request) bool { return !r.metOn(node.Name) }) {
			nodes = append(nodes, node)
		}
	}
	slices.SortFunc(nodes, func(a, b *v1.Node) int { return cmp.Compare(a.Name, b.Name) })
	return nodes
}

func (r *request) metOn(node string) bool {
	return slices.ContainsFunc(r.alts, func(a *alternative) bool { return a.meets(node) })
}

// closeness is how much of what the request needs the node has free (0 to
// 1), with its best alternative.
func (r *request) closeness(node string) (float64, *alternative) {
	best, bestAlt := -1.0, r.alts[0]
	for _, a := range r.alts {
		n, ok := a.nodes[node]
		score := 0.0
		if ok {
			score = float64(min(n.free, a.needOn(n))) / float64(a.needOn(n))
		}
		if score > best {
			best, bestAlt = score, a
		}
	}
	return best, bestAlt
}

// closest returns the nodes that came closest (most of what every request
// needs free), and what each lacks.
func (e *explainer) closest(requests []*request) []NodeReport {
	if len(requests) == 0 {
		return nil
	}
	type scored struct {
		node  string
		score float64
	}
	var nodes []scored
	for _, node := range e.cluster.Nodes {
		total := 0.0
		for _, r := range requests {
			s, _ := r.closeness(node.Name)
			total += s
		}
		if total > 0 {
			nodes = append(nodes, scored{node.Name, total})
		}
	}
	slices.SortFunc(nodes, func(a, b scored) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.node, b.node))
	})
	var out []NodeReport
	for _, s := range nodes[:min(len(nodes), MaxNodesNamed)] {
		report := NodeReport{Node: s.node}
		for _, r := range requests {
			if r.metOn(s.node) {
				continue
			}
			_, a := r.closeness(s.node)
			report.Lacks = append(report.Lacks, lack(a, a.nodes[s.node]))
		}
		if len(report.Lacks) == 0 {
			report.Lacks = []string{"enough free devices for each request, but the allocator does not place the claims together there (or was not asked)"}
		}
		if len(report.Lacks) > MaxTaints {
			report.Lacks = append(report.Lacks[:MaxTaints], fmt.Sprintf("and %d more requests", len(report.Lacks)-MaxTaints))
		}
		out = append(out, report)
	}
	return out
}

// lack says what a node has for an alternative it cannot meet.
func lack(a *alternative, n *nodeCounts) string {
	if n == nil {
		return fmt.Sprintf("%s: no matching device", a.report.Name)
	}
	held := joinNonZero(n.allocated, "allocated", n.tainted, "tainted", n.unhealthy, "Unhealthy", n.counters, "short of counters", n.capacity, "short of capacity")
	if held != "" {
		held = " (" + held + ")"
	}
	return fmt.Sprintf("%s: %d free of %d needed%s", a.report.Name, n.free, a.needOn(n), held)
}

// constraintString renders a constraint for a person.
func constraintString(c resourceapi.DeviceConstraint) string {
	over := "all requests"
	if len(c.Requests) > 0 {
		over = "[" + strings.Join(c.Requests, " ") + "]"
	}
	switch {
	case c.MatchAttribute != nil:
		return fmt.Sprintf("matchAttribute %s over %s", *c.MatchAttribute, over)
	case c.DistinctAttribute != nil:
		return fmt.Sprintf("distinctAttribute %s over %s", *c.DistinctAttribute, over)
	}
	return "a constraint over " + over
}
