// Package drausage holds the counting rules of drascope: which devices of a
// pool claims hold, which are free but cannot be allocated, and what is
// wrong across a pool's slices. It is pure: no clients, no goroutines. The
// scheduler's side cache, kubectl dra and the integration tests' invariant
// all count with it.
package drausage

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/allocated"
)

// MaxValidationErrors is how many validation messages a pool keeps; the rest
// are only counted (PoolUsage.TruncatedErrorCount).
const MaxValidationErrors = 10

// PoolID names a pool: pool names are unique per driver only.
type PoolID struct {
	Driver string
	Pool   string
}

func (id PoolID) String() string { return id.Driver + "/" + id.Pool }

// DeviceState is what a device can do for a new claim right now.
type DeviceState string

const (
	// DeviceAvailable can be allocated.
	DeviceAvailable DeviceState = "Available"
	// DeviceAllocated is held by at least one claim without admin access.
	DeviceAllocated DeviceState = "Allocated"
	// DevicePartiallyAllocated allows multiple allocations and has some, not
	// all, of its capacity consumed. It counts as allocated too.
	DevicePartiallyAllocated DeviceState = "PartiallyAllocated"
	// DeviceUnavailable is free but cannot take an allocation now (Reason says why).
	DeviceUnavailable DeviceState = "Unavailable"
)

// UnavailableReason says why a free device cannot take an allocation now.
type UnavailableReason string

// Reasons for DeviceUnavailable.
const (
	// ReasonTainted: a NoSchedule or NoExecute taint, from the slice or a
	// DeviceTaintRule.
	ReasonTainted UnavailableReason = "Tainted"
	// ReasonCountersExhausted: the shared counters the device consumes are
	// used up by other devices of its partitionable parent.
	ReasonCountersExhausted UnavailableReason = "CountersExhausted"
	// ReasonUnhealthy: kubelet reported the device Unhealthy and the
	// scheduler withholds it (Options.WithholdUnhealthy).
	ReasonUnhealthy UnavailableReason = "Unhealthy"
)

// Summary counts the devices of a pool. Available = Total - Allocated -
// Unavailable; PartiallyAllocated devices are part of Allocated.
type Summary struct {
	Total              int
	Allocated          int
	Available          int
	Unavailable        int
	PartiallyAllocated int
}

// ClaimRef names the claim behind an allocation.
type ClaimRef struct {
	Namespace string
	Name      string
	UID       types.UID
}

func (c ClaimRef) String() string { return c.Namespace + "/" + c.Name }

// Allocation is one claim's result naming a device.
type Allocation struct {
	Claim            ClaimRef
	Request          string
	ShareID          *types.UID
	ConsumedCapacity map[resourceapi.QualifiedName]resource.Quantity
}

// DeviceUsage is one device of a pool and who uses it.
type DeviceUsage struct {
	Name  string
	State DeviceState
	// Reason says why an Unavailable device is; empty for every other state.
	Reason UnavailableReason
	// Message is the detail of Reason for people: which taint, which
	// counter, who reported the device Unhealthy.
	Message string
	// Health is what Options.Health knows of the device.
	Health DeviceHealth
	// Allocations hold the device in use.
	Allocations []Allocation
	// AdminAccess lists KEP-5018 observers: they never count as allocated.
	AdminAccess []Allocation
	// Capacity is, for a device that allows multiple allocations
	// (consumable capacity, KEP-5075), how much of each capacity its shares
	// consume, by capacity name; nil for every other device.
	Capacity []CapacityUse
}

// CapacityUse is how much of one capacity of a shared device is consumed.
type CapacityUse struct {
	Name        resourceapi.QualifiedName
	Used, Total resource.Quantity
}

// Unavailability is Reason and Message as one line for people, such as
// "Tainted: maintenance=true:NoSchedule"; empty when the device is not
// Unavailable.
func (d *DeviceUsage) Unavailability() string {
	if d.Reason == "" {
		return ""
	}
	return string(d.Reason) + ": " + d.Message
}

// ValidationKind classifies a pool validation problem.
type ValidationKind string

const (
	// MissingSlices: fewer slices at the pool's generation than resourceSliceCount.
	MissingSlices ValidationKind = "MissingSlices"
	// MixedGenerations: slices of an older generation are still present.
	MixedGenerations ValidationKind = "MixedGenerations"
	// DuplicateDevice: two slices of the pool publish the same device name.
	DuplicateDevice ValidationKind = "DuplicateDevice"
	// InconsistentSlices: the pool's slices disagree on resourceSliceCount or node.
	InconsistentSlices ValidationKind = "InconsistentSlices"
	// InvalidSliceCount: a slice's resourceSliceCount is beyond
	// MaxSliceCount. The API only requires it to be positive.
	InvalidSliceCount ValidationKind = "InvalidSliceCount"
)

// MaxSliceCount is the largest resourceSliceCount counted as given: a
// ResourcePool's slice counts are int32, and a pool that claims more
// slices is counted at this many, and invalid.
const MaxSliceCount = math.MaxInt32

// ConflictKind says what claims hold beyond what a pool allows, as when two
// scheduler processes race for the same devices.
type ConflictKind string

const (
	// OverAllocatedDevice: a device is held by more claims than it allows.
	OverAllocatedDevice ConflictKind = "OverAllocatedDevice"
	// OverConsumedCapacity: the shares of a device consume more of a
	// capacity than the device has.
	OverConsumedCapacity ConflictKind = "OverConsumedCapacity"
	// OverConsumedCounter: the allocated devices of a pool consume more of
	// a shared counter (partitionable devices) than it holds.
	OverConsumedCounter ConflictKind = "OverConsumedCounter"
)

// Conflict is one device or shared counter that claims over-use. Every
// conflict of a pool is kept: unlike validation errors, none is left out.
type Conflict struct {
	Kind ConflictKind
	// Subject is the device, or "<counter set>/<counter>" for
	// OverConsumedCounter.
	Subject string
	// Message says what is over-used and by how much, naming no claim.
	Message string
	// Claims are every claim whose allocation takes part, so that the
	// conflict can be checked again from just these claims.
	Claims []ClaimRef
}

// Key identifies a conflict within its pool, whatever the claims involved.
func (c Conflict) Key() string { return string(c.Kind) + "/" + c.Subject }

// ConflictKeys are the keys of conflicts.
func ConflictKeys(conflicts []Conflict) sets.Set[string] {
	keys := sets.New[string]()
	for _, c := range conflicts {
		keys.Insert(c.Key())
	}
	return keys
}

// ValidationError is one problem found across a pool's slices and claims.
type ValidationError struct {
	Kind    ValidationKind
	Message string
}

// PoolUsage is the availability of one pool.
type PoolUsage struct {
	PoolID
	// NodeName is set when every slice of the pool names the same node;
	// empty for pools not tied to one node (network-attached devices).
	NodeName string
	// Generation is the pool's highest generation; only its slices count.
	Generation     int64
	ObservedSlices int
	ExpectedSlices int
	Summary        Summary
	// ValidationErrors holds at most MaxValidationErrors problems of the
	// slices; TruncatedErrorCount counts the ones left out.
	ValidationErrors    []ValidationError
	TruncatedErrorCount int
	// Conflicts are what the claims over-use, sorted by kind and subject.
	Conflicts []Conflict
	// Devices, sorted by name.
	Devices []DeviceUsage
	// PhysicalDevices are the pool's shared counter sets (KEP-4815: one
	// per physical device that is offered as partitions), sorted by name;
	// none for a pool without counters.
	PhysicalDevices []PhysicalDevice
	// WholeDevicesFree counts what a pod that wants a whole device can
	// still get: Available devices that consume no counters, and physical
	// devices (counter sets) nothing consumes whose device taking all of
	// them is Available.
	WholeDevicesFree int
}

// PhysicalDevice is one shared counter set of a pool and how it is split.
type PhysicalDevice struct {
	Name string
	// Counters is how much of each counter the set's allocated (and
	// withheld) devices consume, by counter name.
	Counters []CapacityUse
	// Partitions are the allocated devices that draw on the set, sorted.
	Partitions []string
}

// Untouched reports whether no device consumes any of the set's counters.
func (d *PhysicalDevice) Untouched() bool {
	for _, c := range d.Counters {
		if !c.Used.IsZero() {
			return false
		}
	}
	return true
}

// Complete reports whether every slice of the pool's generation is present.
func (p *PoolUsage) Complete() bool { return p.ObservedSlices >= p.ExpectedSlices }

// Valid reports whether the pool passed cross-slice validation and has no
// conflict. Missing slices make a pool incomplete (Complete), not invalid.
func (p *PoolUsage) Valid() bool {
	for _, e := range p.ValidationErrors {
		if e.Kind != MissingSlices {
			return false
		}
	}
	return p.TruncatedErrorCount == 0 && len(p.Conflicts) == 0
}

// ConflictCounts counts the pool's conflicts by kind.
func (p *PoolUsage) ConflictCounts() map[ConflictKind]int {
	counts := map[ConflictKind]int{}
	for _, c := range p.Conflicts {
		counts[c.Kind]++
	}
	return counts
}

// Options tune ComputePoolUsage.
type Options struct {
	// DeviceTaintRules taint devices in addition to the taints their slices
	// carry; pass the cluster's rules, or nil when the slices are already
	// patched (as the scheduler's slice tracker does).
	DeviceTaintRules []*resourceapi.DeviceTaintRule
	// Health, when set, says what is known of a device's health (KEP-4680);
	// it fills DeviceUsage.Health.
	Health func(pool PoolID, device string) DeviceHealth
	// WithholdUnhealthy counts devices as the scheduler allocates them under
	// deviceHealth.policy Avoid: a free device whose Health is Unhealthy is
	// Unavailable (ReasonUnhealthy) and, like an allocated device, uses up
	// the shared counters it consumes.
	WithholdUnhealthy bool
	// HealthTaintKey is the key of the taint the scheduler puts on
	// Unhealthy devices (deviceHealth.policy Taint). A withheld device
	// carrying only that taint is Unavailable for being Unhealthy, which
	// says more than the taint.
	HealthTaintKey string
}

// DeviceHealth is what is known of one device's health.
type DeviceHealth struct {
	// Status is Healthy, Unhealthy, Unknown, or empty when nothing is known.
	Status v1.ResourceHealthStatus
	// Detail says who reported it, when, and why.
	Detail string
}

// ComputePoolUsage counts every pool that the slices describe, sorted by
// driver and pool name. Claims may name devices of any pool; results for
// pools without slices are ignored. Neither input is modified.
func ComputePoolUsage(resourceSlices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, opts Options) []PoolUsage {
	slicesByPool := map[PoolID][]*resourceapi.ResourceSlice{}
	for _, slice := range resourceSlices {
		if slice == nil {
			continue
		}
		id := PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}
		slicesByPool[id] = append(slicesByPool[id], slice)
	}
	claimsByPool := ClaimsByPool(claims)
	pools := make([]PoolUsage, 0, len(slicesByPool))
	for id, poolSlices := range slicesByPool {
		pools = append(pools, ComputePool(id, poolSlices, claimsByPool[id], opts))
	}
	slices.SortFunc(pools, func(a, b PoolUsage) int {
		return cmp.Or(cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Pool, b.Pool))
	})
	return pools
}

// ClaimsByPool indexes allocated claims by every pool their results name.
func ClaimsByPool(claims []*resourceapi.ResourceClaim) map[PoolID][]*resourceapi.ResourceClaim {
	byPool := map[PoolID][]*resourceapi.ResourceClaim{}
	for _, claim := range claims {
		for _, id := range PoolsOf(claim) {
			byPool[id] = append(byPool[id], claim)
		}
	}
	return byPool
}

// PoolsOf returns the pools a claim's allocation names, each once.
func PoolsOf(claim *resourceapi.ResourceClaim) []PoolID {
	if claim == nil || claim.Status.Allocation == nil {
		return nil
	}
	var ids []PoolID
	for _, result := range claim.Status.Allocation.Devices.Results {
		id := PoolID{Driver: result.Driver, Pool: result.Pool}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// device is a device of the pool's current generation while counting.
type device struct {
	spec        *resourceapi.Device
	health      DeviceHealth
	withheld    bool // free but Unhealthy, and Options.WithholdUnhealthy
	dedicated   int
	shares      int
	allocations []Allocation
	admin       []Allocation
	consumed    map[resourceapi.QualifiedName]resource.Quantity
}

// ComputePool counts one pool from its slices (of any generation) and the
// claims whose allocations name it (others are ignored).
func ComputePool(id PoolID, poolSlices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim, opts Options) PoolUsage {
	usage := PoolUsage{PoolID: id}
	errs := &errorList{}

	current := currentGeneration(id, poolSlices, &usage, errs)
	devices, names := collectDevices(current, errs)
	collectAllocations(id, claims, devices)
	if opts.Health != nil {
		for name, d := range devices {
			d.health = opts.Health(id, name)
			d.withheld = opts.WithholdUnhealthy && d.health.Status == v1.ResourceHealthStatusUnhealthy && d.dedicated == 0 && d.shares == 0
		}
	}

	counters := remainingCounters(current, devices)
	for _, name := range names {
		d := devices[name]
		du := DeviceUsage{Name: name, Allocations: d.allocations, AdminAccess: d.admin, Health: d.health, Capacity: d.capacityUse()}
		usage.Conflicts = append(usage.Conflicts, d.conflicts(id, name)...)
		switch {
		case d.dedicated > 0 || d.shares > 0:
			du.State = DeviceAllocated
			if d.dedicated == 0 && d.partiallyConsumed() {
				du.State = DevicePartiallyAllocated
			}
		default:
			du.State, du.Reason, du.Message = freeDeviceState(id, d, counters, opts)
		}
		usage.Devices = append(usage.Devices, du)
		usage.Summary.count(du.State)
	}
	usage.Conflicts = append(usage.Conflicts, counterConflicts(current, devices)...)
	usage.PhysicalDevices = physicalDevices(current, devices, counters)
	usage.WholeDevicesFree = wholeDevicesFree(usage.PhysicalDevices, usage.Devices, devices)
	slices.SortFunc(usage.Conflicts, func(a, b Conflict) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Subject, b.Subject))
	})
	usage.Summary.Available = usage.Summary.Total - usage.Summary.Allocated - usage.Summary.Unavailable
	usage.ValidationErrors, usage.TruncatedErrorCount = errs.kept, errs.truncated
	return usage
}

// currentGeneration returns the slices at the pool's highest generation and
// fills in generation, slice counts and node name.
func currentGeneration(id PoolID, poolSlices []*resourceapi.ResourceSlice, usage *PoolUsage, errs *errorList) []*resourceapi.ResourceSlice {
	var current []*resourceapi.ResourceSlice
	older := 0
	for _, slice := range poolSlices {
		switch gen := slice.Spec.Pool.Generation; {
		case len(current) == 0 || gen > usage.Generation:
			older += len(current)
			current = append(current[:0], slice)
			usage.Generation = gen
		case gen == usage.Generation:
			current = append(current, slice)
		default:
			older++
		}
	}
	// Slices in name order make messages and the choice among duplicates stable.
	slices.SortFunc(current, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	usage.ObservedSlices = len(current)
	if older > 0 {
		errs.add(MixedGenerations, fmt.Sprintf("pool %s: %d slice(s) of an older generation are ignored; the pool is at generation %d", id, older, usage.Generation))
	}
	nodes := map[string]bool{}
	expected := map[int64]bool{}
	tooMany := ""
	for _, slice := range current {
		nodes[ptr.Deref(slice.Spec.NodeName, "")] = true
		count := slice.Spec.Pool.ResourceSliceCount
		expected[count] = true
		if count > MaxSliceCount {
			if tooMany == "" {
				tooMany = fmt.Sprintf("pool %s: slice %s gives resourceSliceCount %d, more than the %d a pool can have", id, slice.Name, count, MaxSliceCount)
			}
			count = MaxSliceCount
		}
		usage.ExpectedSlices = max(usage.ExpectedSlices, int(count))
	}
	if tooMany != "" {
		errs.add(InvalidSliceCount, tooMany)
	}
	if len(expected) > 1 {
		errs.add(InconsistentSlices, fmt.Sprintf("pool %s: slices of generation %d disagree on resourceSliceCount", id, usage.Generation))
	}
	if len(nodes) == 1 {
		for node := range nodes {
			usage.NodeName = node
		}
	} else if len(nodes) > 1 {
		errs.add(InconsistentSlices, fmt.Sprintf("pool %s: slices of generation %d name different nodes", id, usage.Generation))
	}
	if usage.ObservedSlices < usage.ExpectedSlices {
		errs.add(MissingSlices, fmt.Sprintf("pool %s is incomplete: %d of %d slices at generation %d", id, usage.ObservedSlices, usage.ExpectedSlices, usage.Generation))
	}
	return current
}

// collectDevices indexes the devices of the current slices by name; a name
// published twice keeps the first slice's device and is reported.
func collectDevices(current []*resourceapi.ResourceSlice, errs *errorList) (map[string]*device, []string) {
	devices := map[string]*device{}
	source := map[string]string{}
	var names []string
	for _, slice := range current {
		for i := range slice.Spec.Devices {
			spec := &slice.Spec.Devices[i]
			if first, ok := source[spec.Name]; ok {
				errs.add(DuplicateDevice, fmt.Sprintf("device %q is published by slices %s and %s", spec.Name, first, slice.Name))
				continue
			}
			source[spec.Name] = slice.Name
			devices[spec.Name] = &device{spec: spec}
			names = append(names, spec.Name)
		}
	}
	slices.Sort(names)
	return devices, names
}

// collectAllocations records which claims hold which devices of the pool.
func collectAllocations(id PoolID, claims []*resourceapi.ResourceClaim, devices map[string]*device) {
	for _, claim := range claims {
		if claim == nil || claim.Status.Allocation == nil {
			continue
		}
		ref := ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.Driver != id.Driver || result.Pool != id.Pool {
				continue
			}
			d, ok := devices[result.Device]
			if !ok {
				// A device the pool no longer publishes: nothing to count.
				continue
			}
			a := Allocation{Claim: ref, Request: result.Request, ShareID: result.ShareID, ConsumedCapacity: result.ConsumedCapacity}
			// Counted as the allocator counts: a ShareID is always a
			// share here, as the claim says, whatever the gates.
			switch allocated.HoldOf(&result, true) {
			case allocated.Nothing:
				d.admin = append(d.admin, a)
			case allocated.Share:
				d.shares++
				d.allocations = append(d.allocations, a)
				for name, q := range result.ConsumedCapacity {
					if d.consumed == nil {
						d.consumed = map[resourceapi.QualifiedName]resource.Quantity{}
					}
					sum := d.consumed[name]
					sum.Add(q)
					d.consumed[name] = sum
				}
			default:
				d.dedicated++
				d.allocations = append(d.allocations, a)
			}
		}
	}
}

// conflicts returns how the device is held beyond what it allows: by more
// claims, or by shares that consume more than its capacity.
func (d *device) conflicts(id PoolID, name string) []Conflict {
	var out []Conflict
	multiple := ptr.Deref(d.spec.AllowMultipleAllocations, false)
	held := ""
	switch {
	case d.dedicated > 1:
		held = fmt.Sprintf("allocated to %d claims without admin access", d.dedicated)
	case d.dedicated > 0 && d.shares > 0:
		held = fmt.Sprintf("allocated to a claim and shared by %d other claim(s)", d.shares)
	case d.shares > 1 && !multiple:
		held = fmt.Sprintf("shared by %d claims but does not allow multiple allocations", d.shares)
	}
	if held != "" {
		out = append(out, Conflict{Kind: OverAllocatedDevice, Subject: name,
			Message: fmt.Sprintf("device %s/%s is %s", id, name, held), Claims: claimsOf(d.allocations)})
	}
	if d.shares == 0 {
		return out
	}
	for _, capName := range sortedKeys(d.spec.Capacity) {
		capacity := d.spec.Capacity[capName].Value
		consumed, ok := d.consumed[capName]
		if ok && consumed.Cmp(capacity) > 0 {
			out = append(out, Conflict{Kind: OverConsumedCapacity, Subject: name,
				Message: fmt.Sprintf("device %s/%s: its shares consume %s of capacity %s, which is %s", id, name, consumed.String(), capName, capacity.String()),
				Claims:  claimsOf(d.allocations)})
			break
		}
	}
	return out
}

// counterConflicts reports each shared counter that the pool's allocated
// devices consume more of than it holds. Withheld devices do not count
// here: nobody holds them. A device allowing multiple allocations consumes
// its counters once, however many shares it has, as upstream counts it.
func counterConflicts(current []*resourceapi.ResourceSlice, devices map[string]*device) []Conflict {
	type use struct {
		value, consumed resource.Quantity
		devices         []*device
	}
	uses := map[counterKey]*use{}
	for _, slice := range current {
		for _, set := range slice.Spec.SharedCounters {
			for name, counter := range set.Counters {
				uses[counterKey{set.Name, name}] = &use{value: counter.Value}
			}
		}
	}
	if len(uses) == 0 {
		return nil
	}
	for _, d := range devices {
		if d.dedicated == 0 && d.shares == 0 {
			continue
		}
		for _, consumption := range d.spec.ConsumesCounters {
			for name, counter := range consumption.Counters {
				if u, ok := uses[counterKey{consumption.CounterSet, name}]; ok {
					u.consumed.Add(counter.Value)
					u.devices = append(u.devices, d)
				}
			}
		}
	}
	var out []Conflict
	for key, u := range uses {
		if u.consumed.Cmp(u.value) <= 0 {
			continue
		}
		var claims []ClaimRef
		for _, d := range u.devices {
			claims = append(claims, claimsOf(d.allocations)...)
		}
		out = append(out, Conflict{Kind: OverConsumedCounter, Subject: key.set + "/" + key.counter,
			Message: fmt.Sprintf("counter %s/%s: allocated devices consume %s of %s", key.set, key.counter, u.consumed.String(), u.value.String()),
			Claims:  sortedClaims(claims)})
	}
	return out
}

// claimsOf returns the claims of allocations, each once, in name order
// (the order of the claims fed in is not stable).
func claimsOf(allocations []Allocation) []ClaimRef {
	refs := make([]ClaimRef, 0, len(allocations))
	for _, a := range allocations {
		refs = append(refs, a.Claim)
	}
	return sortedClaims(refs)
}

func sortedClaims(refs []ClaimRef) []ClaimRef {
	slices.SortFunc(refs, func(a, b ClaimRef) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	return slices.Compact(refs)
}

// capacityUse is what the device's shares consume of each capacity, for a
// device that allows multiple allocations.
func (d *device) capacityUse() []CapacityUse {
	if !ptr.Deref(d.spec.AllowMultipleAllocations, false) || len(d.spec.Capacity) == 0 {
		return nil
	}
	out := make([]CapacityUse, 0, len(d.spec.Capacity))
	for _, name := range sortedKeys(d.spec.Capacity) {
		out = append(out, CapacityUse{Name: name, Used: d.consumed[name], Total: d.spec.Capacity[name].Value})
	}
	return out
}

// partiallyConsumed reports whether a shared device can take more: some of
// its capacity is left, or it has no capacity to run out of.
func (d *device) partiallyConsumed() bool {
	if len(d.spec.Capacity) == 0 {
		return true
	}
	for name, capacity := range d.spec.Capacity {
		consumed := d.consumed[name]
		if consumed.Cmp(capacity.Value) < 0 {
			return true
		}
	}
	return false
}

// counterKey names one counter of one counter set of the pool.
type counterKey struct{ set, counter string }

// remainingCounters subtracts what allocated and withheld devices consume
// from the pool's shared counters (partitionable devices). Withheld devices
// count because the scheduler hands them to its allocator as in use.
func remainingCounters(current []*resourceapi.ResourceSlice, devices map[string]*device) map[counterKey]resource.Quantity {
	remaining := map[counterKey]resource.Quantity{}
	for _, slice := range current {
		for _, set := range slice.Spec.SharedCounters {
			for name, counter := range set.Counters {
				remaining[counterKey{set.Name, name}] = counter.Value.DeepCopy()
			}
		}
	}
	if len(remaining) == 0 {
		return remaining
	}
	for _, d := range devices {
		if d.dedicated == 0 && d.shares == 0 && !d.withheld {
			continue
		}
		for _, consumption := range d.spec.ConsumesCounters {
			for name, counter := range consumption.Counters {
				key := counterKey{consumption.CounterSet, name}
				if left, ok := remaining[key]; ok {
					left.Sub(counter.Value)
					remaining[key] = left
				}
			}
		}
	}
	return remaining
}

// physicalDevices describes each shared counter set of the pool: what is
// consumed of it (its value less remaining) and which allocated devices
// draw on it.
func physicalDevices(current []*resourceapi.ResourceSlice, devices map[string]*device, remaining map[counterKey]resource.Quantity) []PhysicalDevice {
	var out []PhysicalDevice
	for _, slice := range current {
		for _, set := range slice.Spec.SharedCounters {
			if slices.ContainsFunc(out, func(pd PhysicalDevice) bool { return pd.Name == set.Name }) {
				// Named twice (invalid; validation reports it): shown once.
				continue
			}
			pd := PhysicalDevice{Name: set.Name}
			for name, counter := range set.Counters {
				used := counter.Value.DeepCopy()
				if left, ok := remaining[counterKey{set.Name, name}]; ok {
					used.Sub(left)
				}
				pd.Counters = append(pd.Counters, CapacityUse{Name: resourceapi.QualifiedName(name), Used: used, Total: counter.Value})
			}
			slices.SortFunc(pd.Counters, func(a, b CapacityUse) int { return cmp.Compare(a.Name, b.Name) })
			out = append(out, pd)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b PhysicalDevice) int { return cmp.Compare(a.Name, b.Name) })
	index := make(map[string]int, len(out))
	for i, pd := range out {
		index[pd.Name] = i
	}
	for name, d := range devices {
		if d.dedicated == 0 && d.shares == 0 {
			continue
		}
		for _, c := range d.spec.ConsumesCounters {
			if i, ok := index[c.CounterSet]; ok && !slices.Contains(out[i].Partitions, name) {
				out[i].Partitions = append(out[i].Partitions, name)
			}
		}
	}
	for i := range out {
		slices.Sort(out[i].Partitions)
	}
	return out
}

// wholeDevicesFree counts what a pod wanting a whole device can get: the
// Available devices that draw on no counters, and the physical devices
// (counter sets, or the sets one device spans) that nothing draws on and
// whose device taking all of their counters is Available (not tainted,
// not withheld). A physical device offered by several such devices counts
// once.
func wholeDevicesFree(physical []PhysicalDevice, usage []DeviceUsage, devices map[string]*device) int {
	byName := make(map[string]*PhysicalDevice, len(physical))
	for i := range physical {
		byName[physical[i].Name] = &physical[i]
	}
	takesAll := func(c resourceapi.DeviceCounterConsumption) bool {
		pd, ok := byName[c.CounterSet]
		if !ok || !pd.Untouched() {
			return false
		}
		for _, counter := range pd.Counters {
			consumed, ok := c.Counters[string(counter.Name)]
			if !ok || consumed.Value.Cmp(counter.Total) != 0 {
				return false
			}
		}
		return true
	}
	free := 0
	counted := map[string]bool{}
	for _, du := range usage {
		if du.State != DeviceAvailable {
			continue
		}
		consumes := devices[du.Name].spec.ConsumesCounters
		if len(consumes) == 0 {
			free++
			continue
		}
		if !slices.ContainsFunc(consumes, func(c resourceapi.DeviceCounterConsumption) bool { return !takesAll(c) }) {
			var names []string
			for _, c := range consumes {
				names = append(names, c.CounterSet)
			}
			slices.Sort(names)
			if key := strings.Join(names, ","); !counted[key] {
				counted[key] = true
				free++
			}
		}
	}
	return free
}

// freeDeviceState decides whether a device nobody holds can take an
// allocation, and if not, why.
func freeDeviceState(id PoolID, d *device, counters map[counterKey]resource.Quantity, opts Options) (DeviceState, UnavailableReason, string) {
	skip := ""
	if d.withheld {
		skip = opts.HealthTaintKey
	}
	if taint := blockingTaint(id, d.spec, opts.DeviceTaintRules, skip); taint != nil {
		return DeviceUnavailable, ReasonTainted, fmt.Sprintf("%s=%s:%s", taint.Key, taint.Value, taint.Effect)
	}
	if d.withheld {
		return DeviceUnavailable, ReasonUnhealthy, d.health.Detail
	}
	for _, consumption := range d.spec.ConsumesCounters {
		for _, name := range sortedKeys(consumption.Counters) {
			left, ok := counters[counterKey{consumption.CounterSet, name}]
			if ok && left.Cmp(consumption.Counters[name].Value) < 0 {
				return DeviceUnavailable, ReasonCountersExhausted, fmt.Sprintf("counter %s/%s has %s left, the device needs %s",
					consumption.CounterSet, name, left.String(), ptr.To(consumption.Counters[name].Value).String())
			}
		}
	}
	return DeviceAvailable, "", ""
}

// blockingTaint returns a NoSchedule or NoExecute taint on the device, from
// its slice or from a DeviceTaintRule that selects it, or nil.
// Taints with key skip (when not empty) do not count.
func blockingTaint(id PoolID, spec *resourceapi.Device, rules []*resourceapi.DeviceTaintRule, skip string) *resourceapi.DeviceTaint {
	for i := range spec.Taints {
		if blocks(spec.Taints[i].Effect) && (skip == "" || spec.Taints[i].Key != skip) {
			return &spec.Taints[i]
		}
	}
	for _, rule := range rules {
		if !blocks(rule.Spec.Taint.Effect) || (skip != "" && rule.Spec.Taint.Key == skip) || !RuleSelects(rule, id, spec.Name) {
			continue
		}
		return &resourceapi.DeviceTaint{Key: rule.Spec.Taint.Key, Value: rule.Spec.Taint.Value, Effect: rule.Spec.Taint.Effect}
	}
	return nil
}

// RuleSelects reports whether a DeviceTaintRule's device selector selects
// the device of the pool: each field it sets must match, and a rule
// without a selector selects nothing.
func RuleSelects(rule *resourceapi.DeviceTaintRule, pool PoolID, device string) bool {
	sel := rule.Spec.DeviceSelector
	return sel != nil &&
		(sel.Driver == nil || *sel.Driver == pool.Driver) &&
		(sel.Pool == nil || *sel.Pool == pool.Pool) &&
		(sel.Device == nil || *sel.Device == device)
}

func blocks(effect resourceapi.DeviceTaintEffect) bool {
	return effect == resourceapi.DeviceTaintEffectNoSchedule || effect == resourceapi.DeviceTaintEffectNoExecute
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (s *Summary) count(state DeviceState) {
	s.Total++
	switch state {
	case DeviceAllocated:
		s.Allocated++
	case DevicePartiallyAllocated:
		s.Allocated++
		s.PartiallyAllocated++
	case DeviceUnavailable:
		s.Unavailable++
	}
}

// errorList keeps the first MaxValidationErrors errors and counts the rest.
type errorList struct {
	kept      []ValidationError
	truncated int
}

func (l *errorList) add(kind ValidationKind, message string) {
	if len(l.kept) < MaxValidationErrors {
		l.kept = append(l.kept, ValidationError{Kind: kind, Message: message})
		return
	}
	l.truncated++
}

// String renders errors one per line, for logs and events.
func (e ValidationError) String() string { return string(e.Kind) + ": " + e.Message }
