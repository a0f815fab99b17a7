// Package gangpreempt follows the devices of a gang's preemption
// (docs/gangs.md). Upstream's pod-group preemption (DefaultPreemption's
// PodGroupPostFilter) removes every pod of lower priority from the
// scheduler's snapshot, runs the whole group cycle again (the framework's
// pgSchedulingFunc), and then puts the victims back one at a time, sparing
// each with which every member still passes Filter. It tells no plugin
// that pods were removed, and upstream's DynamicResources counts devices
// in use from the claims, never from the snapshot's pods: the victims'
// devices stay in use, and no gang is ever placed by evicting the pods that
// hold its devices.
//
// DRAScopePreemption (pkg/plugins/drascopepreemption) is DefaultPreemption
// that marks the context with a DryRun before it delegates. Under that
// mark, the DRAScope plugin:
//
//  1. in a member's PreFilter, finds the victims (those pods gone from the
//     snapshot: DryRun.Free) and hands upstream's allocator the in-use set
//     without the devices of claims only victims use (WithoutFreed), less
//     those another member already put in flight and those a release hold
//     keeps, and the slices with the victims' devices last (VictimsLast).
//     Upstream's PreFilter, Filter and Reserve then place the member on
//     them as on free devices. Nodes are not pruned: the index knows
//     nothing of victims.
//  2. in Reserve, records in the member's what-if the devices it chose.
//  3. in AddPod, for a victim put back whose devices a member chose, makes
//     that member's Filter fail (Conflict), so it stays a victim. Members
//     keep the devices the dry run chose for them: a victim is spared only
//     when no member needs its devices, and the members then place as the
//     dry run did.
//
// A member whose devices DRAScope cannot follow this way (claims allocated
// already or shared with its group, admin access, extended resources) gets
// no victim's devices: the dry run places it on free ones or fails. Pods
// of the group's own claims, network-attached pools' devices held by pods
// of other nodes and shared devices are freed exactly as the claims say:
// only devices every consumer of whose claim is a victim.
package gangpreempt

import (
	"context"
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/victims"
)

// DryRun is one pod-group preemption's dry run.
type DryRun struct {
	// before are the pods that use claims as the dry run began, by UID.
	before map[types.UID]*v1.Pod
	once   sync.Once
	Devices
}

// Devices are what a dry run's victims free.
type Devices struct {
	// FreedBy are, by victim, the devices held only by victims whose
	// claims the victim uses: those it must give up for a member to take
	// them.
	FreedBy map[types.UID]sets.Set[structured.DeviceID]
	// Freed is the union of FreedBy.
	Freed sets.Set[structured.DeviceID]
	// Released are devices of claims whose pods are all gone already (the
	// victims of an earlier preemption, whose claims the resourceclaim
	// controller has yet to deallocate); Held are the devices any claim
	// holds or has in flight (nil: not known). Devices in use that no
	// claim holds are free too (victims.Release).
	Released, Held sets.Set[structured.DeviceID]
	// Counters are the shared counter sets (KEP-4815) each device of the
	// victims' pools consumes: two devices drawing on one set exclude each
	// other although their IDs differ.
	Counters map[structured.DeviceID]sets.Set[CounterSet]
}

// CounterSet is a pool's shared counter set.
type CounterSet struct {
	Driver, Pool, Name string
}

// New starts a dry run over the pods that use claims as the snapshot holds
// them before upstream removes the victims.
func New(before map[types.UID]*v1.Pod) *DryRun {
	return &DryRun{before: before}
}

// Found is a dry run whose devices are known already (tests).
func Found(devices Devices) *DryRun {
	p := &DryRun{Devices: devices}
	p.once.Do(func() {})
	return p
}

type contextKey struct{}

// NewContext marks ctx for the dry run.
func NewContext(ctx context.Context, p *DryRun) context.Context {
	return context.WithValue(ctx, contextKey{}, p)
}

// From returns the dry run ctx is marked for, or nil.
func From(ctx context.Context) *DryRun {
	p, _ := ctx.Value(contextKey{}).(*DryRun)
	return p
}

// Free finds, the first time a member asks, the victims (pods of before
// that remaining no longer holds: upstream removes them all before it runs
// the group cycle) and the devices they free, and reports whether there is
// anything to free. shares says the allocator tracks shared devices;
// listSlices lists the scheduler's slices, for the victims' counter sets.
func (p *DryRun) Free(remaining func() (sets.Set[types.UID], error), view victims.View, shares bool, listSlices func() ([]*resourceapi.ResourceSlice, error)) bool {
	p.once.Do(func() {
		p.FreedBy, p.Freed = map[types.UID]sets.Set[structured.DeviceID]{}, sets.New[structured.DeviceID]()
		p.Released = sets.New[structured.DeviceID]()
		stay, err := remaining()
		if err != nil {
			return
		}
		gone := maps.Clone(p.before)
		for uid := range stay {
			delete(gone, uid)
		}
		wholeInto := func(ids sets.Set[structured.DeviceID]) allocated.Visitor {
			return allocated.Visitor{Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { ids.Insert(id) }}
		}
		for uid, victim := range gone {
			ids := sets.New[structured.DeviceID]()
			for _, allocation := range view.FreedBy(map[types.UID]*v1.Pod{uid: victim}, gone, nil) {
				allocated.Each(allocation, shares, wholeInto(ids))
			}
			if ids.Len() > 0 {
				p.FreedBy[uid] = ids
				p.Freed = p.Freed.Union(ids)
			}
		}
		// As a per-pod dry run does: an earlier preemption's victims are
		// gone, their claims not yet released; counted in use, they would
		// make this one choose new victims.
		release := view.Releasing()
		for _, allocation := range release.Allocations {
			allocated.Each(allocation, shares, wholeInto(p.Released))
		}
		p.Held = release.Held
		p.Counters = counterSetsOf(p.Freed, listSlices)
	})
	return p.Freed.Len() > 0 || p.Released.Len() > 0 || p.Held != nil
}

// counterSetsOf returns the counter sets every device of the pools of ids
// consumes.
func counterSetsOf(ids sets.Set[structured.DeviceID], listSlices func() ([]*resourceapi.ResourceSlice, error)) map[structured.DeviceID]sets.Set[CounterSet] {
	pools := sets.New[drausage.PoolID]()
	for id := range ids {
		pools.Insert(drausage.PoolID{Driver: id.Driver.String(), Pool: id.Pool.String()})
	}
	counters := map[structured.DeviceID]sets.Set[CounterSet]{}
	listed, err := listSlices()
	if err != nil {
		return counters
	}
	for _, slice := range listed {
		if !pools.Has(drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}) {
			continue
		}
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			for _, consumed := range device.ConsumesCounters {
				id := structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name)
				if counters[id] == nil {
					counters[id] = sets.New[CounterSet]()
				}
				counters[id].Insert(CounterSet{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name, Name: consumed.CounterSet})
			}
		}
	}
	return counters
}

// WithoutFreed takes out of an in-use set the victims' devices, those of
// claims about to be released, and those no claim holds, except those in
// taken: another member of the dry run put them in flight.
func (p *DryRun) WithoutFreed(inUse sets.Set[structured.DeviceID], taken sets.Set[structured.DeviceID]) {
	for id := range inUse {
		free := p.Freed.Has(id) || p.Released.Has(id) || (p.Held != nil && !p.Held.Has(id))
		if free && !taken.Has(id) {
			inUse.Delete(id)
		}
	}
}

// VictimsLast returns the slices with the victims' devices after the
// others, copying only the slices that change: upstream's allocator takes
// devices in the order listed, so a member takes a free device before a
// victim's, and preemption spares the victims it need not evict.
func (p *DryRun) VictimsLast(listed []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out, copied := listed, false
	for i, slice := range listed {
		isVictims := func(d resourceapi.Device) bool {
			return p.Freed.Has(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name))
		}
		if !slices.ContainsFunc(slice.Spec.Devices, isVictims) {
			continue
		}
		devices := make([]resourceapi.Device, 0, len(slice.Spec.Devices))
		for _, d := range slice.Spec.Devices {
			if !isVictims(d) {
				devices = append(devices, d)
			}
		}
		for _, d := range slice.Spec.Devices {
			if isVictims(d) {
				devices = append(devices, d)
			}
		}
		if !copied {
			out, copied = slices.Clone(listed), true
		}
		reordered := *slice
		reordered.Spec.Devices = devices
		out[i] = &reordered
	}
	return out
}

// FreesDevices reports whether the pod is a victim whose devices the dry
// run freed.
func (p *DryRun) FreesDevices(uid types.UID) bool {
	return p.FreedBy[uid] != nil
}

// Conflict reports whether a victim put back (reinstated) holds a device a
// member chose in the dry run, or one drawing on a counter set a chosen
// device draws on: the member's device no longer fits beside it.
func (p *DryRun) Conflict(chosen sets.Set[structured.DeviceID], reinstated sets.Set[types.UID]) bool {
	chosenCounters := sets.New[CounterSet]()
	for id := range chosen {
		chosenCounters = chosenCounters.Union(p.Counters[id])
	}
	for uid := range reinstated {
		for id := range p.FreedBy[uid] {
			if chosen.Has(id) || chosenCounters.HasAny(p.Counters[id].UnsortedList()...) {
				return true
			}
		}
	}
	return false
}

// FreeByPool counts, per pool, the victims' devices the dry run hands a
// member as free now: neither taken (in flight for another member) nor
// kept (held or withheld, which the member's allocator never gets).
func (p *DryRun) FreeByPool(taken, kept sets.Set[structured.DeviceID]) map[drausage.PoolID]int {
	counts := map[drausage.PoolID]int{}
	for id := range p.Freed.Union(p.Released) {
		if !taken.Has(id) && !kept.Has(id) {
			counts[drausage.PoolID{Driver: id.Driver.String(), Pool: id.Pool.String()}]++
		}
	}
	return counts
}
