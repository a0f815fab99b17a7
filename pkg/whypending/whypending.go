// Package whypending explains why a pod's DRA claims keep it pending: for
// each request, how many nodes reach matching devices and how many of
// those have enough free, what keeps the others (allocated, tainted,
// Unhealthy, short of shared counters), which nodes came closest and what
// each lacks, and where upstream's structured allocator, asked node by
// node under a deadline, would place the claims (pkg/dryrun). It reads what
// a client could read (the caller says what was hidden) and knows nothing
// of clients or the scheduler framework; `kubectl dra describe pod` is its
// user.
package whypending

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/dryrun"
)

// Bounds on what a report names and how long it searches: a report is read
// by a person, and a pod may ask for anything.
const (
	// MaxNodesNamed bounds the nodes a report names.
	MaxNodesNamed = 5
	// MaxTaints bounds the taints a verdict names.
	MaxTaints = 3
	// MaxExpression bounds each selector's text.
	MaxExpression = 200
	// MaxEvents bounds the events a report lists.
	MaxEvents = 10
	// DefaultTimeout bounds the allocator's runs together, and
	// DefaultMaxRuns their number.
	DefaultTimeout = 10 * time.Second
	DefaultMaxRuns = 200
)

// DefaultFeatures are the allocator features of a v1.37 scheduler with its
// default gates (dynamicresources.AllocatorFeatures of them): a client
// cannot read the scheduler's.
var DefaultFeatures = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	ConsumableCapacity:      true,
	DeviceBindingAndStatus:  true,
	FractionalCapacityRange: true,
}

// Cluster is what the explanation reads.
type Cluster struct {
	Nodes  []*v1.Node
	Slices []*resourceapi.ResourceSlice
	// TaintRules taint devices besides their slices' taints.
	TaintRules []*resourceapi.DeviceTaintRule
	Classes    deviceclass.List
	// Pools are the pools' device states (pkg/drausage), with the devices
	// that claims the caller could not read hold marked as held.
	Pools []drausage.PoolUsage
	// Claims are the claims the caller could read: their allocations are
	// what the allocator sees in use, besides the devices held by others
	// and those withheld that Pools shows.
	Claims []*resourceapi.ResourceClaim
	// Pods are the pods the caller could read, to tell the devices only
	// pods of lower priority hold; nil when unknown.
	Pods     []*v1.Pod
	Features structured.Features
	// What the caller could not read: the slices (no verdict can be
	// given), the device classes (a class is unknown, not missing), the
	// nodes (Nodes are stand-ins named after the slices' nodes, without
	// labels: the pod's node selector and affinity are not applied).
	SlicesHidden, ClassesHidden, NodesHidden bool
}

// PodClaim is one of the pod's claims, as the caller found it.
type PodClaim struct {
	// Name is the pod's name for it; ResourceClaim the claim's name
	// ("" when made from a template and not created yet).
	Name          string
	ResourceClaim string
	// Claim is nil when it does not exist or may not be read (Hidden).
	Claim  *resourceapi.ResourceClaim
	Hidden bool
}

// Options bound the search, and say what the scheduler checks besides
// devices.
type Options struct {
	Timeout time.Duration
	MaxRuns int
	// AdminAccess, when set, is the admin-access guard DRAScope applies
	// (pkg/adminaccess): its refusal is the report's conclusion.
	AdminAccess *adminaccess.Guard
}

// Explain reports on the pod's claims.
func Explain(ctx context.Context, pod *v1.Pod, claims []PodClaim, c Cluster, o Options) *Report {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = DefaultMaxRuns
	}
	var notes []string
	if !c.NodesHidden {
		c.Nodes = mayRunOn(pod, c.Nodes, &notes)
	}
	c.Nodes = allowedByAllocations(claims, c.Nodes, &notes)
	e := newExplainer(ctx, pod, c)
	e.notes = append(notes, e.notes...)
	r := &Report{APIVersion: APIVersion, Kind: Kind, Pod: klog.KObj(pod).String(), Node: pod.Spec.NodeName}
	var toAllocate []*resourceapi.ResourceClaim
	var requests []*request
	for _, pc := range claims {
		cr, reqs := e.claim(pc)
		r.Claims = append(r.Claims, cr)
		requests = append(requests, reqs...)
		if pc.Claim != nil && pc.Claim.Status.Allocation == nil {
			toAllocate = append(toAllocate, pc.Claim)
		}
	}
	if o.AdminAccess != nil {
		if refusal := o.AdminAccess.Check(toAllocate); refusal != nil {
			r.AdminAccessRefused = refusal.Message
		}
	}
	if len(toAllocate) > 0 && !c.SlicesHidden {
		nodes := e.meetingEvery(requests)
		r.Fit = e.fit(ctx, toAllocate, nodes, o)
		if r.Fit.Count == 0 {
			r.Closest = e.closest(requests)
		}
	}
	r.Notes = e.notes
	r.Conclusion = conclude(r, requests, claims, c.ClassesHidden)
	return r
}

// mayRunOn are the nodes the pod's node selector and required node
// affinity allow: the scheduler looks for its devices there only.
func mayRunOn(pod *v1.Pod, nodes []*v1.Node, notes *[]string) []*v1.Node {
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	var out []*v1.Node
	for _, node := range nodes {
		if ok, err := required.Match(node); ok && err == nil {
			out = append(out, node)
		}
	}
	if left := len(nodes) - len(out); left > 0 {
		*notes = append(*notes, fmt.Sprintf("%d of %d nodes are left out by the pod's node selector or required node affinity", left, len(nodes)))
	}
	return out
}

// allowedByAllocations are the nodes every allocated claim of the pod
// allows (its allocation's node selector): the scheduler places the pod
// there only.
func allowedByAllocations(claims []PodClaim, nodes []*v1.Node, notes *[]string) []*v1.Node {
	var selectors []*nodeaffinity.NodeSelector
	for _, pc := range claims {
		if pc.Claim == nil || pc.Claim.Status.Allocation == nil || pc.Claim.Status.Allocation.NodeSelector == nil {
			continue
		}
		selector, err := nodeaffinity.NewNodeSelector(pc.Claim.Status.Allocation.NodeSelector)
		if err != nil {
			continue
		}
		selectors = append(selectors, selector)
	}
	if len(selectors) == 0 {
		return nodes
	}
	var out []*v1.Node
	for _, node := range nodes {
		if !slices.ContainsFunc(selectors, func(s *nodeaffinity.NodeSelector) bool { return !s.Match(node) }) {
			out = append(out, node)
		}
	}
	if left := len(nodes) - len(out); left > 0 {
		*notes = append(*notes, fmt.Sprintf("%d of %d nodes are left out by where the pod's allocated claims are", left, len(nodes)))
	}
	return out
}

// device is one device of a pool's current generation.
type device struct {
	id    structured.DeviceID
	pool  drausage.PoolID
	spec  *resourceapi.Device
	slice *resourceapi.ResourceSlice
	usage *drausage.DeviceUsage
	// taints are the NoSchedule and NoExecute taints on it, from its
	// slice and the rules.
	taints []resourceapi.DeviceTaint
}

type explainer struct {
	ctx      context.Context
	pod      *v1.Pod
	cluster  Cluster
	devices  []*device
	poolNode map[drausage.PoolID]string
	// selectors cache the compiled node selectors of slices and devices.
	selectors map[any]*nodeaffinity.NodeSelector
	// lower reports whether only pods of lower priority than the pod use
	// a claim; nil when the pods are unknown.
	lower func(drausage.ClaimRef) bool
	notes []string
}

func newExplainer(ctx context.Context, pod *v1.Pod, c Cluster) *explainer {
	e := &explainer{ctx: ctx, pod: pod, cluster: c, poolNode: map[drausage.PoolID]string{}, selectors: map[any]*nodeaffinity.NodeSelector{}}
	byPool := map[drausage.PoolID][]*resourceapi.ResourceSlice{}
	for _, slice := range c.Slices {
		id := drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}
		byPool[id] = append(byPool[id], slice)
	}
	var unusable []string
	for i := range c.Pools {
		p := &c.Pools[i]
		e.poolNode[p.PoolID] = p.NodeName
		if !p.Complete() {
			// The allocator skips an incomplete pool.
			unusable = append(unusable, p.PoolID.String())
			continue
		}
		usage := map[string]*drausage.DeviceUsage{}
		for j := range p.Devices {
			usage[p.Devices[j].Name] = &p.Devices[j]
		}
		for _, slice := range byPool[p.PoolID] {
			if slice.Spec.Pool.Generation != p.Generation {
				continue
			}
			for k := range slice.Spec.Devices {
				spec := &slice.Spec.Devices[k]
				u, ok := usage[spec.Name]
				if !ok {
					continue
				}
				// A device listed twice counts once.
				delete(usage, spec.Name)
				e.devices = append(e.devices, &device{
					id: structured.MakeDeviceID(p.Driver, p.Pool, spec.Name), pool: p.PoolID,
					spec: spec, slice: slice, usage: u, taints: blockingTaints(p.PoolID, spec, c.TaintRules),
				})
			}
		}
	}
	if len(unusable) > 0 {
		slices.Sort(unusable)
		more := ""
		if len(unusable) > MaxNodesNamed {
			more = fmt.Sprintf(" and %d more", len(unusable)-MaxNodesNamed)
			unusable = unusable[:MaxNodesNamed]
		}
		e.notes = append(e.notes, fmt.Sprintf("pools incomplete (slices missing), whose devices the allocator does not offer: %s%s", strings.Join(unusable, ", "), more))
	}
	e.lower = lowerPriority(pod, c)
	return e
}

// blockingTaints are the NoSchedule and NoExecute taints of a device, from
// its slice and from the rules that select it.
func blockingTaints(id drausage.PoolID, spec *resourceapi.Device, rules []*resourceapi.DeviceTaintRule) []resourceapi.DeviceTaint {
	var taints []resourceapi.DeviceTaint
	for _, taint := range spec.Taints {
		if blocks(taint.Effect) {
			taints = append(taints, taint)
		}
	}
	for _, rule := range rules {
		if !blocks(rule.Spec.Taint.Effect) || !drausage.RuleSelects(rule, id, spec.Name) {
			continue
		}
		taints = append(taints, resourceapi.DeviceTaint{Key: rule.Spec.Taint.Key, Value: rule.Spec.Taint.Value, Effect: rule.Spec.Taint.Effect})
	}
	return taints
}

func blocks(effect resourceapi.DeviceTaintEffect) bool {
	return effect == resourceapi.DeviceTaintEffectNoSchedule || effect == resourceapi.DeviceTaintEffectNoExecute
}

// lowerPriority returns whether only pods of lower priority than pod use a
// claim (none when the pod may not preempt or the pods are unknown).
func lowerPriority(pod *v1.Pod, c Cluster) func(drausage.ClaimRef) bool {
	if c.Pods == nil || (pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever) {
		return nil
	}
	priority := podPriority(pod)
	pods := map[types.UID]*v1.Pod{}
	for _, p := range c.Pods {
		pods[p.UID] = p
	}
	claims := map[types.UID]*resourceapi.ResourceClaim{}
	for _, claim := range c.Claims {
		claims[claim.UID] = claim
	}
	return func(ref drausage.ClaimRef) bool {
		claim, ok := claims[ref.UID]
		if !ok || len(claim.Status.ReservedFor) == 0 {
			return false
		}
		for _, consumer := range claim.Status.ReservedFor {
			p, ok := pods[consumer.UID]
			if !ok || podPriority(p) >= priority {
				return false
			}
		}
		return true
	}
}

func podPriority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// reaches reports whether the node can use the device.
func (e *explainer) reaches(d *device, node *v1.Node) bool {
	if n, ok := e.poolNode[d.pool]; ok && n != "" {
		return n == node.Name
	}
	spec := d.slice.Spec
	switch {
	case spec.NodeName != nil && *spec.NodeName != "":
		return *spec.NodeName == node.Name
	case spec.AllNodes != nil && *spec.AllNodes:
		return true
	case spec.NodeSelector != nil:
		return e.matches(d.slice, spec.NodeSelector, node)
	case spec.PerDeviceNodeSelection != nil && *spec.PerDeviceNodeSelection:
		switch {
		case d.spec.NodeName != nil:
			return *d.spec.NodeName == node.Name
		case d.spec.AllNodes != nil && *d.spec.AllNodes:
			return true
		case d.spec.NodeSelector != nil:
			return e.matches(d.spec, d.spec.NodeSelector, node)
		}
	}
	return false
}

func (e *explainer) matches(owner any, selector *v1.NodeSelector, node *v1.Node) bool {
	compiled, ok := e.selectors[owner]
	if !ok {
		var err error
		if compiled, err = nodeaffinity.NewNodeSelector(selector); err != nil {
			compiled = nil
		}
		e.selectors[owner] = compiled
	}
	return compiled != nil && compiled.Match(node)
}

// fit asks the allocator, node by node, where the claims fit: only the
// nodes with enough free devices for every request, within o's bounds.
func (e *explainer) fit(ctx context.Context, claims []*resourceapi.ResourceClaim, nodes []*v1.Node, o Options) *FitReport {
	f := &FitReport{}
	if len(nodes) == 0 {
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cycle := e.allocatorCycle(claims, o.Timeout)
	var fitNothing *v1.Node
	var failure error
	for i, node := range nodes {
		if f.Tried == o.MaxRuns {
			f.Untried, f.RunsExhausted = len(nodes)-i, true
			break
		}
		if ctx.Err() != nil {
			f.Untried, f.TimedOut = len(nodes)-i, true
			break
		}
		f.Tried++
		results, err := cycle.Node(node).Allocate(ctx, claims)
		switch {
		case err == nil && results != nil:
			f.Count++
			if len(f.Nodes) < MaxNodesNamed {
				f.Nodes = append(f.Nodes, node.Name)
			}
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dryrun.ErrTimedOut):
			f.Tried--
			f.Untried, f.TimedOut = len(nodes)-i, true
		case err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) && failure == nil:
			// Not a shortage: a CEL error, an invalid pool, a class.
			failure = err
		case fitNothing == nil:
			fitNothing = node
		}
		if f.TimedOut {
			break
		}
	}
	if f.Count == 0 && fitNothing != nil && hasConstraints(claims) {
		// Every request has enough free devices there: do the claims
		// fit without their constraints? (One node's answer.)
		results, err := cycle.Node(fitNothing).Allocate(ctx, withoutConstraints(claims))
		f.ConstraintsFail = err == nil && results != nil
	}
	switch {
	case f.TimedOut:
		e.notes = append(e.notes, fmt.Sprintf("the allocator was asked about %d of %d nodes with enough free devices before its %s ran out", f.Tried, len(nodes), o.Timeout))
	case f.RunsExhausted:
		e.notes = append(e.notes, fmt.Sprintf("the allocator was asked about the first %d of %d nodes with enough free devices (at most %d runs)", f.Tried, len(nodes), o.MaxRuns))
	}
	if failure != nil {
		e.notes = append(e.notes, "the allocator failed on a node for another reason than a shortage: "+truncate(failure.Error(), 2*MaxExpression))
	}
	return f
}

// allocatorCycle is the dry-run view of the cluster's devices for the
// allocator: the slices with the rules' taints, and in use what the
// readable claims hold, the devices held by claims that could not be read,
// and those the scheduler withholds as Unhealthy. For a pod whose every
// request asks for admin access, counters are consumed at zero, as
// DRAScope allocates them (pkg/adminaccess).
func (e *explainer) allocatorCycle(claims []*resourceapi.ResourceClaim, runTimeout time.Duration) *dryrun.Cycle {
	shares := e.cluster.Features.ConsumableCapacity
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range e.cluster.Claims {
		allocated.Each(claim.Status.Allocation, shares, allocated.Visitor{
			Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) {
				state.AllocatedDevices.Insert(id)
			},
			Share: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity) {
				state.AllocatedSharedDeviceIDs.Insert(id)
				if consumed != nil {
					state.AggregatedCapacity.Insert(*consumed)
				}
			},
		})
	}
	for _, d := range e.devices {
		heldByOthers := (d.usage.State == drausage.DeviceAllocated || d.usage.State == drausage.DevicePartiallyAllocated) && len(d.usage.Allocations) == 0
		if heldByOthers || d.usage.Reason == drausage.ReasonUnhealthy {
			state.AllocatedDevices.Insert(d.id)
		}
	}
	listed := withRuleTaints(e.cluster.Slices, e.cluster.TaintRules)
	if adminaccess.UseOf(claims, 0, func() bool { return false }) == adminaccess.Only {
		listed = adminaccess.WithZeroCounterConsumption(listed)
	}
	allocating := dryrun.Allocating{
		RunTimeout: runTimeout,
		Features:   e.cluster.Features,
		Classes:    e.cluster.Classes,
		CEL: cel.NewCache(10, cel.Features{
			EnableConsumableCapacity: e.cluster.Features.ConsumableCapacity,
			EnableListTypeAttributes: e.cluster.Features.ListTypeAttributes,
		}),
	}
	return dryrun.NewCycle(allocating, state, sets.New[structured.DeviceID](), listed)
}

// withRuleTaints returns the slices with the rules' taints added to the
// devices they select, as the scheduler's slice tracker hands them to the
// allocator, copying only the slices that change.
func withRuleTaints(listed []*resourceapi.ResourceSlice, rules []*resourceapi.DeviceTaintRule) []*resourceapi.ResourceSlice {
	if len(rules) == 0 {
		return listed
	}
	out := make([]*resourceapi.ResourceSlice, len(listed))
	for i, slice := range listed {
		out[i] = slice
		var copied *resourceapi.ResourceSlice
		for j := range slice.Spec.Devices {
			var add []resourceapi.DeviceTaint
			pool := drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}
			for _, rule := range rules {
				if !drausage.RuleSelects(rule, pool, slice.Spec.Devices[j].Name) {
					continue
				}
				add = append(add, resourceapi.DeviceTaint{Key: rule.Spec.Taint.Key, Value: rule.Spec.Taint.Value, Effect: rule.Spec.Taint.Effect, TimeAdded: rule.Spec.Taint.TimeAdded})
			}
			if len(add) == 0 {
				continue
			}
			if copied == nil {
				copied = slice.DeepCopy()
				out[i] = copied
			}
			copied.Spec.Devices[j].Taints = append(copied.Spec.Devices[j].Taints, add...)
		}
	}
	return out
}

func hasConstraints(claims []*resourceapi.ResourceClaim) bool {
	return slices.ContainsFunc(claims, func(c *resourceapi.ResourceClaim) bool { return len(c.Spec.Devices.Constraints) > 0 })
}

func withoutConstraints(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, len(claims))
	for i, claim := range claims {
		copied := claim.DeepCopy()
		copied.Spec.Devices.Constraints = nil
		out[i] = copied
	}
	return out
}

// tolerated reports whether the tolerations tolerate every taint.
func tolerated(taints []resourceapi.DeviceTaint, tolerations []resourceapi.DeviceToleration) bool {
	for _, taint := range taints {
		if !slices.ContainsFunc(tolerations, func(t resourceapi.DeviceToleration) bool { return resourceclaim.ToleratesTaint(t, taint) }) {
			return false
		}
	}
	return true
}

func taintString(t resourceapi.DeviceTaint) string {
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// joinNonZero joins "N what" for each count that is not zero.
func joinNonZero(parts ...any) string {
	var out []string
	for i := 0; i+1 < len(parts); i += 2 {
		if n := parts[i].(int); n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, parts[i+1]))
		}
	}
	return strings.Join(out, ", ")
}
