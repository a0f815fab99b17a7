package health

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
)

// holding is what a pod was allocated: the devices of its claims that are
// reserved for it. Anyone who may write pods/status can write any resource
// ID into a pod's status, so a report is believed only from a holder.
//
// When a pod fails, the resourceclaim controller deallocates its claims
// (and deletes those made from templates) at once, so the check at that
// moment finds nothing: the holding is remembered while the pod exists,
// running or finished, and for holdingGrace after it left the scheduler's
// informer without turning up among finished pods (deleted while running).
type holding struct {
	devices sets.Set[Device]
	// results are the allocation results of each of the pod's claims (by
	// the pod's claim name), for CDI device IDs of released claims. Replaced,
	// never changed in place: reportsOf reads it without the lock.
	results map[string][]resourceapi.DeviceRequestAllocationResult
	// complete is set once every claim of the pod was found allocated and
	// reserved for it; until then each event looks again.
	complete bool
	// finished is set once the pod was seen Failed or Succeeded: a later
	// event of the scheduler's informer is older than that and ignored.
	// finishedAt is when it finished (see finishTime): its Unhealthy
	// reports hold their devices for a hold time from then, however long
	// the pod object is kept.
	finished   bool
	finishedAt time.Time
	// left is when the pod left the scheduler's informer and was not (yet)
	// seen finished; zero otherwise.
	left time.Time
	// pod is the pod's latest object while some of its reports were not
	// believed, to look again when a claim event completes the holding.
	pod *v1.Pod
}

// holdingGrace is how long a pod's holding and reports are remembered after
// it left the scheduler's informer without being seen finished: long enough
// for the informer of finished pods to deliver its final status.
const holdingGrace = 10 * time.Minute

// holdingOfLocked returns what the pod holds, looking at its claims again
// while the holding is incomplete. The claims come from the informer cache.
func (c *Cache) holdingOfLocked(pod *v1.Pod) *holding {
	h := c.holdings[pod.UID]
	if h != nil && h.complete {
		return h
	}
	devices, results, complete := c.claimedDevices(pod)
	if h == nil {
		if devices.Len() == 0 && !isRunning(pod) {
			// A finished pod whose claims are gone: nothing to remember.
			return nil
		}
		h = &holding{devices: sets.New[Device]()}
		c.holdings[pod.UID] = h
	}
	h.devices = h.devices.Union(devices)
	if len(results) > 0 {
		merged := make(map[string][]resourceapi.DeviceRequestAllocationResult, len(h.results)+len(results))
		for name, r := range h.results {
			merged[name] = r
		}
		for name, r := range results {
			merged[name] = r
		}
		h.results = merged
	}
	h.complete = complete
	return h
}

// claimedDevices returns the devices of the pod's claims that are
// allocated and reserved for it, their results by the pod's claim name, and
// whether every claim was.
func (c *Cache) claimedDevices(pod *v1.Pod) (sets.Set[Device], map[string][]resourceapi.DeviceRequestAllocationResult, bool) {
	devices := sets.New[Device]()
	var results map[string][]resourceapi.DeviceRequestAllocationResult
	complete := true
	if c.opts.Resolver.Claim == nil {
		return devices, nil, false
	}
	for i := range pod.Spec.ResourceClaims {
		podClaim := &pod.Spec.ResourceClaims[i]
		name, _, err := resourceclaim.Name(pod, podClaim)
		if err != nil {
			complete = false
			continue
		}
		if name == nil {
			continue // not needed: no claim was made for this pod
		}
		claim, err := c.opts.Resolver.Claim(pod.Namespace, *name)
		if err != nil || claim == nil || claim.Status.Allocation == nil || !resourceclaim.IsReservedForPod(pod, claim, false) {
			complete = false
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			devices.Insert(Device{Driver: r.Driver, Pool: r.Pool, Name: r.Device})
		}
		if results == nil {
			results = map[string][]resourceapi.DeviceRequestAllocationResult{}
		}
		results[podClaim.Name] = claim.Status.Allocation.Devices.Results
	}
	return devices, results, complete
}

// finishTime is when a finished pod's last container ended, as its status
// says, and now when it says nothing or a time still to come: a status
// writer can only bring the end of a hold forward, never push it back.
func finishTime(pod *v1.Pod, now time.Time) time.Time {
	var last time.Time
	for _, statuses := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for i := range statuses {
			if t := statuses[i].State.Terminated; t != nil && t.FinishedAt.After(last) {
				last = t.FinishedAt.Time
			}
		}
	}
	if last.IsZero() || last.After(now) {
		return now
	}
	return last
}

func isRunning(pod *v1.Pod) bool {
	return pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
}

// observeClaim adds a claim's devices to the holdings of the pods it is
// reserved for. A pod's own events look its claims up too, but the claim
// informer may deliver the allocation after the pod's events (a pod that
// fails to start goes from bound to Failed at once; at start-up, pods and
// claims are listed concurrently): the claim event completes what the pod
// holds, and reports that were not believed for lack of it are looked at
// again.
func (c *Cache) observeClaim(logger klog.Logger, claim *resourceapi.ResourceClaim) {
	if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) == 0 {
		return
	}
	var again []*v1.Pod
	c.mu.Lock()
	for _, consumer := range claim.Status.ReservedFor {
		h := c.holdings[consumer.UID]
		if consumer.APIGroup != "" || consumer.Resource != "pods" || h == nil {
			continue
		}
		added := false
		for _, r := range claim.Status.Allocation.Devices.Results {
			d := Device{Driver: r.Driver, Pool: r.Pool, Name: r.Device}
			if !h.devices.Has(d) {
				h.devices.Insert(d)
				added = true
			}
		}
		if added && h.pod != nil {
			again = append(again, h.pod)
		}
	}
	c.mu.Unlock()
	for _, pod := range again {
		c.ObservePod(logger, pod)
	}
}

// ObservePod records the trusted health reports in a pod's current status,
// for a pod that is bound to a node, running or finished.
func (c *Cache) ObservePod(logger klog.Logger, pod *v1.Pod) {
	if pod.Spec.NodeName == "" || len(pod.Spec.ResourceClaims) == 0 {
		// Only pods with claims can have DRA entries (the apiserver
		// checks entry names against the containers' claims).
		return
	}
	c.mu.RLock()
	var held map[string][]resourceapi.DeviceRequestAllocationResult
	if h := c.holdings[pod.UID]; h != nil {
		if h.finished && isRunning(pod) {
			// An event of the scheduler's informer that is older than the
			// final status already seen.
			c.mu.RUnlock()
			return
		}
		held = h.results
	}
	c.mu.RUnlock()
	reports := c.reportsOf(logger, pod, held)

	now := c.opts.Clock.Now()
	c.mu.Lock()
	h := c.holdingOfLocked(pod)
	restored := c.restored[pod.UID]
	delete(c.restored, pod.UID)
	if restored.Len() > 0 {
		// Confirmed: the pod a persisted rule names still exists. Its
		// claims were released long ago; what the rule says it held is
		// what it holds.
		if h == nil {
			h = &holding{devices: sets.New[Device](), complete: true}
			c.holdings[pod.UID] = h
		}
		h.devices = h.devices.Union(restored)
	}
	if h != nil {
		h.left = time.Time{}
		if !h.finished && !isRunning(pod) {
			h.finished, h.finishedAt = true, finishTime(pod, now)
		}
		h.pod = nil
	}
	var untrusted []Device
	for d := range reports {
		if h == nil || !h.devices.Has(d) {
			delete(reports, d)
			untrusted = append(untrusted, d)
		}
	}
	if len(untrusted) > 0 && h != nil && isRunning(pod) {
		h.pod = pod
	}
	// A finished pod's report must not shorten a hold that is running
	// already (its drop below holds from its finish, which may be earlier).
	var heldBefore map[Device]time.Time
	if h != nil && h.finished {
		for d := range reports {
			if e, ok := c.devices[d]; ok && !e.HeldUntil.IsZero() {
				if heldBefore == nil {
					heldBefore = map[Device]time.Time{}
				}
				heldBefore[d] = e.HeldUntil
			}
		}
	}
	var changed []Device
	if len(reports) > 0 || c.pods[pod.UID].reports != nil || restored.Len() > 0 {
		if reports == nil {
			reports = map[Device]report{}
		}
		changed = c.setReportsLocked(pod.UID, pod.Namespace+"/"+pod.Name, pod.Spec.NodeName, reports, now)
	}
	for d := range restored {
		// The pod a rule names no longer reports the device Unhealthy.
		if reports[d].health != v1.ResourceHealthStatusUnhealthy && c.dropHolderLocked(d, pod.UID, now) {
			changed = append(changed, d)
		}
	}
	if h != nil && h.finished {
		// A finished pod's word holds for a hold time from its finish, not
		// for as long as its object is kept: whoever may write that pod's
		// status must not keep a device out of service for good.
		for d, r := range reports {
			if r.health == v1.ResourceHealthStatusUnhealthy && c.dropHolderLocked(d, pod.UID, h.finishedAt) && !slices.Contains(changed, d) {
				changed = append(changed, d)
			}
			if e := c.devices[d]; e != nil && e.HeldUntil.Before(heldBefore[d]) {
				e.HeldUntil = heldBefore[d]
			}
		}
	}
	c.mu.Unlock()
	if len(untrusted) > 0 {
		slices.SortFunc(untrusted, Device.Compare)
		c.distrust(logger, pod, untrusted)
	}
	c.changed(logger, changed)
}

// distrust counts and logs, once per pod, reports about devices the pod
// does not hold.
func (c *Cache) distrust(logger klog.Logger, pod *v1.Pod, devices []Device) {
	if c.opts.OnIgnored != nil {
		for range devices {
			c.opts.OnIgnored(IgnoredNotHolder)
		}
	}
	if c.untrusted.first(string(pod.UID)) {
		logger.Info("Ignoring device health reports about devices the pod does not hold: none of its claims reserved for it has them allocated",
			"pod", klog.KObj(pod), "node", pod.Spec.NodeName, "phase", pod.Status.Phase, "devices", devices)
		return
	}
	logger.V(5).Info("Ignoring device health reports about devices the pod does not hold", "pod", klog.KObj(pod), "devices", devices)
}

// podLeft is told that a pod left the scheduler's informer: deleted, or
// finished (then finished is true, and ObservePod sees its final status
// from the informer of finished pods). A pod that is not known to have
// finished no longer holds its devices Unhealthy: their hold time starts.
// What it reported and held is kept for holdingGrace, in case its final
// status is still on its way; an unchanged report then reads as such.
func (c *Cache) podLeft(logger klog.Logger, uid types.UID, finished bool) {
	if finished {
		return
	}
	now := c.opts.Clock.Now()
	c.mu.Lock()
	if h := c.holdings[uid]; h != nil && !h.finished {
		h.left = now
	}
	var changed []Device
	if p, ok := c.pods[uid]; ok && p.left.IsZero() {
		for d, r := range p.reports {
			if r.health == v1.ResourceHealthStatusUnhealthy && c.dropHolderLocked(d, uid, now) {
				changed = append(changed, d)
			}
		}
		p.left = now
		c.pods[uid] = p
	}
	c.mu.Unlock()
	c.changed(logger, changed)
}

// podDeleted is told that a finished pod was deleted.
func (c *Cache) podDeleted(logger klog.Logger, uid types.UID) {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	delete(c.holdings, uid)
	var changed []Device
	if _, ok := c.pods[uid]; ok {
		changed = c.setReportsLocked(uid, "", "", nil, now)
	}
	c.mu.Unlock()
	c.changed(logger, changed)
}

// pruneLocked forgets holdings and reports of pods that left the
// scheduler's informer holdingGrace ago and were not seen finished.
func (c *Cache) pruneLocked(now time.Time) {
	for uid, h := range c.holdings {
		if !h.left.IsZero() && now.Sub(h.left) >= holdingGrace {
			delete(c.holdings, uid)
		}
	}
	for uid, p := range c.pods {
		if !p.left.IsZero() && now.Sub(p.left) >= holdingGrace {
			delete(c.pods, uid)
		}
	}
}
