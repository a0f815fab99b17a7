package drascope

// Devices for a gang's preemption (docs/gangs.md). Upstream's pod-group
// preemption (DefaultPreemption's PodGroupPostFilter) removes every pod of
// lower priority from the scheduler's snapshot, runs the whole group cycle
// again (the framework's pgSchedulingFunc), and then puts the victims back
// one at a time, sparing each with which every member still passes
// Filter. It tells no plugin that pods were removed, and upstream's
// DynamicResources counts devices in use from the claims, never from the
// snapshot's pods: the victims' devices stay in use, and no gang is ever
// placed by evicting the pods that hold its devices.
//
// DRAScopePreemption (pkg/plugins/drascopepreemption) is DefaultPreemption
// that marks the context before it delegates (WithPodGroupPreemption), with
// the snapshot's pods that use claims. Under that mark:
//
//  1. A member's PreFilter finds the victims (those pods gone from the
//     snapshot) and hands upstream's allocator the in-use set without the
//     devices of claims only victims use, less those another member
//     already put in flight and those a release hold keeps. Upstream's
//     PreFilter, Filter and Reserve then place the member on them as on
//     free devices. Nodes are not pruned: the index knows nothing of
//     victims.
//  2. Reserve records, in the member's what-if, the devices it chose.
//  3. A victim put back (AddPod) whose devices a member chose makes that
//     member's Filter fail, so it stays a victim. Members keep the devices
//     the dry run chose for them: a victim is spared only when no member
//     needs its devices, and the members then place as the dry run did.
//
// A member whose devices DRAScope cannot follow this way (claims allocated
// already or shared with its group, admin access, extended resources) gets
// no victim's devices: the dry run places it on free ones or fails. Pods
// of the group's own claims, network-attached pools' devices held by pods
// of other nodes and shared devices are freed exactly as the claims say:
// only devices every consumer of whose claim is a victim.

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
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/drausage"
)

type podGroupPreemptionKey struct{}

// podGroupPreemption is one pod-group preemption's dry run.
type podGroupPreemption struct {
	// before are the pods that use claims as the dry run began, by UID.
	before map[types.UID]*v1.Pod
	once   sync.Once
	// freedBy are, by victim, the devices held only by victims whose
	// claims the victim uses: those it must give up for a member to
	// take them.
	freedBy map[types.UID]sets.Set[structured.DeviceID]
	// freed is the union of freedBy.
	freed sets.Set[structured.DeviceID]
	// released are devices of claims whose pods are all gone already
	// (the victims of an earlier preemption, whose claims the
	// resourceclaim controller has yet to deallocate); held are the
	// devices any claim holds or has in flight (nil: not known). Devices
	// in use that no claim holds are free too (releaseView).
	released, held sets.Set[structured.DeviceID]
	// counters are the shared counter sets (KEP-4815) each device of the
	// victims' pools consumes: two devices drawing on one set exclude each
	// other although their IDs differ.
	counters map[structured.DeviceID]sets.Set[counterSet]
}

// counterSet is a pool's shared counter set.
type counterSet struct {
	driver, pool, name string
}

// WithPodGroupPreemption marks ctx for a pod-group preemption that is about
// to mutate snapshot: call it before upstream's PodGroupPostFilter of
// DefaultPreemption, with the scheduler's snapshot as it is before.
func WithPodGroupPreemption(ctx context.Context, snapshot fwk.SharedLister) context.Context {
	nodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return ctx
	}
	before := map[types.UID]*v1.Pod{}
	for _, n := range nodes {
		for _, info := range n.GetPods() {
			if pod := info.GetPod(); len(pod.Spec.ResourceClaims) > 0 {
				before[pod.UID] = pod
			}
		}
	}
	return context.WithValue(ctx, podGroupPreemptionKey{}, &podGroupPreemption{before: before})
}

func podGroupPreemptionIn(ctx context.Context) *podGroupPreemption {
	p, _ := ctx.Value(podGroupPreemptionKey{}).(*podGroupPreemption)
	return p
}

// victimsFreed finds, the first time a member asks, the victims (pods of
// before gone from the snapshot: upstream removes them all before it runs
// the group cycle) and the devices they free, and reports whether there
// is anything to free.
func (pl *DRAScope) victimsFreed(p *podGroupPreemption) bool {
	p.once.Do(func() {
		p.freedBy, p.freed = map[types.UID]sets.Set[structured.DeviceID]{}, sets.New[structured.DeviceID]()
		p.released = sets.New[structured.DeviceID]()
		nodes, err := pl.handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return
		}
		victims := maps.Clone(p.before)
		for _, n := range nodes {
			for _, info := range n.GetPods() {
				delete(victims, info.GetPod().UID)
			}
		}
		shares := pl.allocating.Features.ConsumableCapacity
		wholeInto := func(ids sets.Set[structured.DeviceID]) allocated.Visitor {
			return allocated.Visitor{Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { ids.Insert(id) }}
		}
		for uid, victim := range victims {
			ids := sets.New[structured.DeviceID]()
			for _, allocation := range pl.allocationsFreedBy(map[types.UID]*v1.Pod{uid: victim}, victims, nil) {
				allocated.Each(allocation, shares, wholeInto(ids))
			}
			if ids.Len() > 0 {
				p.freedBy[uid] = ids
				p.freed = p.freed.Union(ids)
			}
		}
		// As a per-pod dry run does (filterWhatIf): an earlier
		// preemption's victims are gone, their claims not yet released;
		// counted in use, they would make this one choose new victims.
		view := pl.readReleaseView()
		for _, allocation := range view.allocations {
			allocated.Each(allocation, shares, wholeInto(p.released))
		}
		p.held = view.held
		p.counters = pl.counterSetsOf(p.freed)
	})
	return p.freed.Len() > 0 || p.released.Len() > 0 || p.held != nil
}

// counterSetsOf returns the counter sets every device of the pools of ids
// consumes.
func (pl *DRAScope) counterSetsOf(ids sets.Set[structured.DeviceID]) map[structured.DeviceID]sets.Set[counterSet] {
	pools := sets.New[drausage.PoolID]()
	for id := range ids {
		pools.Insert(drausage.PoolID{Driver: id.Driver.String(), Pool: id.Pool.String()})
	}
	counters := map[structured.DeviceID]sets.Set[counterSet]{}
	listed, err := pl.manager.SharedDRAManager.ResourceSlices().ListWithDeviceTaintRules()
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
					counters[id] = sets.New[counterSet]()
				}
				counters[id].Insert(counterSet{driver: slice.Spec.Driver, pool: slice.Spec.Pool.Name, name: consumed.CounterSet})
			}
		}
	}
	return counters
}

// freeVictimsDevices starts, for a gang member in a pod-group preemption's
// dry run whose devices DRAScope can follow, handing upstream's allocator
// the victims' devices as free; stop ends it. dryRun is nil outside such a
// dry run and for other members.
func (pl *DRAScope) freeVictimsDevices(ctx context.Context, pod *v1.Pod, claims *podClaims) (dryRun *podGroupPreemption, stop func()) {
	p := podGroupPreemptionIn(ctx)
	if p == nil || pl.manager == nil || pod.Spec.SchedulingGroup == nil || !pl.mayFollowDevices(pod, claims) {
		return nil, func() {}
	}
	if !pl.victimsFreed(p) {
		return nil, func() {}
	}
	pl.manager.claims.freeing.Store(p)
	klog.FromContext(ctx).V(5).Info("Pod group preemption: victims' devices are free for the member", "pod", klog.KObj(pod), "devices", p.freed.Len(), "released", p.released.Len())
	return p, func() { pl.manager.claims.freeing.Store(nil) }
}

// mayFollowDevices reports whether a what-if can follow the devices of the
// pod's claims: takeCycleView's and newWhatIf's conditions, as far as
// they are known before upstream's PreFilter.
func (pl *DRAScope) mayFollowDevices(pod *v1.Pod, claims *podClaims) bool {
	if !pl.enabled || !allToAllocate(pod, claims) || !pl.dryRunAllocates(claims.toAllocate) {
		return false
	}
	for _, claim := range claims.toAllocate {
		if pl.claims.GetPendingAllocation(claim.UID) != nil {
			return false
		}
	}
	return true
}

// withoutFreed takes out of an in-use set the victims' devices, those of
// claims about to be released, and those no claim holds, except those in
// flight: another member of the dry run took them.
func (t *claimTracker) withoutFreed(state structured.AllocatedState, shares bool) {
	p := t.freeing.Load()
	if p == nil {
		return
	}
	taken := t.inFlightDevices(shares)
	for id := range state.AllocatedDevices {
		free := p.freed.Has(id) || p.released.Has(id) || (p.held != nil && !p.held.Has(id))
		if free && !taken.Has(id) {
			state.AllocatedDevices.Delete(id)
		}
	}
}

// victimsLast returns the slices with the victims' devices after the
// others, copying only the slices that change: upstream's allocator takes
// devices in the order listed, so a member takes a free device before a
// victim's, and preemption spares the victims it need not evict.
func victimsLast(listed []*resourceapi.ResourceSlice, p *podGroupPreemption) []*resourceapi.ResourceSlice {
	out, copied := listed, false
	for i, slice := range listed {
		isVictims := func(d resourceapi.Device) bool {
			return p.freed.Has(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name))
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

// recordChosen notes, in a dry run, the devices Reserve put in flight for
// the member's claims.
func (pl *DRAScope) recordChosen(w *whatIf) {
	if w == nil || w.dryRun == nil {
		return
	}
	shares := pl.allocating.Features.ConsumableCapacity
	for _, claim := range w.claims {
		allocated.Each(pl.claims.GetPendingAllocation(claim.UID), shares, allocated.Visitor{
			Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { w.chosen.Insert(id) },
		})
	}
}

// reinstate records a victim the dry run puts back; false when pod is no
// victim whose devices were freed.
func (w *whatIf) reinstate(pod *v1.Pod) bool {
	if w.dryRun == nil || w.dryRun.freedBy[pod.UID] == nil {
		return false
	}
	w.reinstated.Insert(pod.UID)
	return true
}

// unreinstate undoes reinstate; false when pod was not reinstated.
func (w *whatIf) unreinstate(pod *v1.Pod) bool {
	if w.dryRun == nil || !w.reinstated.Has(pod.UID) {
		return false
	}
	w.reinstated.Delete(pod.UID)
	return true
}

// reinstatedConflict returns a status when a victim put back holds a
// device the member chose in the dry run.
func (w *whatIf) reinstatedConflict() *fwk.Status {
	if w == nil || w.dryRun == nil || len(w.reinstated) == 0 {
		return nil
	}
	counters := w.dryRun.counters
	chosenCounters := sets.New[counterSet]()
	for id := range w.chosen {
		chosenCounters = chosenCounters.Union(counters[id])
	}
	for uid := range w.reinstated {
		for id := range w.dryRun.freedBy[uid] {
			// The same device, or one drawing on a counter set the
			// member's device draws on: the member's device no longer
			// fits beside it.
			if w.chosen.Has(id) || chosenCounters.HasAny(counters[id].UnsortedList()...) {
				return fwk.NewStatus(fwk.Unschedulable, "the pod group's preemption needs the devices of a pod it would spare")
			}
		}
	}
	return nil
}

// preFilterInDryRun ends PreFilter for a member given the victims'
// devices: with a what-if that follows what its Reserve chooses, and every
// node of result (neither pruned nor kept to a nominated node: both read
// devices as the informers show them). Without a what-if, nothing would
// keep a victim the member needs from being spared, so the member fails.
func (pl *DRAScope) preFilterInDryRun(state fwk.CycleState, dryRun *podGroupPreemption, w *whatIf, kept sets.Set[structured.DeviceID], result *fwk.PreFilterResult) (*fwk.PreFilterResult, *fwk.Status) {
	if w == nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "pod group preemption: the member's claims changed during the dry run")
	}
	w.dryRun, w.chosen, w.reinstated = dryRun, sets.New[structured.DeviceID](), sets.New[types.UID]()
	w.kept = kept
	state.Write(whatIfStateKey, w)
	return result, nil
}

// inFlightDevices are the devices this profile's in-flight allocations
// hold whole.
func (t *claimTracker) inFlightDevices(shares bool) sets.Set[structured.DeviceID] {
	taken := sets.New[structured.DeviceID]()
	for _, allocation := range t.inFlight() {
		allocated.Each(allocation, shares, allocated.Visitor{
			Whole: func(_ *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) { taken.Insert(id) },
		})
	}
	return taken
}

// victimsDevicesByPool counts, per pool, the victims' devices a pod-group
// preemption's dry run hands the member out as free now (none in flight
// for a member before): scoring, which reads the side cache, counts them as used.
// Counted free, a gang packs onto the victims' nodes as it would onto free
// ones, and preemption spares the victims of the nodes it leaves alone.
func (pl *DRAScope) victimsDevicesByPool(state fwk.CycleState) map[drausage.PoolID]int {
	w := whatIfIn(state)
	if w == nil || w.dryRun == nil || pl.manager == nil {
		return nil
	}
	p := w.dryRun
	taken := pl.manager.claims.inFlightDevices(pl.allocating.Features.ConsumableCapacity)
	counts := map[drausage.PoolID]int{}
	for id := range p.freed.Union(p.released) {
		if !taken.Has(id) && !w.kept.Has(id) {
			counts[drausage.PoolID{Driver: id.Driver.String(), Pool: id.Pool.String()}]++
		}
	}
	return counts
}

// keptOf returns the devices a cycle's in-use set holds for no claim.
func keptOf(view *cycleView) sets.Set[structured.DeviceID] {
	if view == nil {
		return nil
	}
	return view.seen.kept
}
