// Package health remembers the device health that kubelet reports in pod
// status (KEP-4680): status.containerStatuses[].allocatedResourcesStatus, and
// the same list in init and ephemeral container statuses. DRA entries are
// named "claim:<claim>" or "claim:<claim>/<request>"; each resource is
// "<driver>/<pool>/<device>" (or a CDI device ID, see resolve.go).
//
// The cache keeps the latest report per device, with its time, source pod
// and message. A device reported Unhealthy stays Unhealthy until a later
// Healthy report, or until the hold time has passed since its last Unhealthy
// report; then it is Unknown. Reports outlive their pods: the pod that found
// a broken device is usually deleted before its replacement is scheduled.
package health

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Device names one device of one pool.
type Device struct {
	Driver, Pool, Name string
}

func (d Device) String() string { return d.Driver + "/" + d.Pool + "/" + d.Name }

// Report is what the cache knows of one device.
type Report struct {
	Device Device
	// Health is Healthy, Unhealthy or Unknown.
	Health v1.ResourceHealthStatus
	// Pod ("namespace/name") and Node reported the health last.
	Pod, Node string
	// Message is kubelet's message, if the driver gave one.
	Message string
	// Since is when the device entered its current health.
	Since time.Time
	// Last is the latest report of that health.
	Last time.Time
	// Expired is set when an Unhealthy report outlived the hold time.
	Expired bool
}

// maxMessage bounds kubelet's message in Detail, so that the detail fits in
// a ResourcePool device reason.
const maxMessage = 256

// Detail says who reported the health, when, and why, for people: pod
// status messages, ResourcePool reasons, kubectl dra.
func (r Report) Detail() string {
	if r.Expired {
		return fmt.Sprintf("last reported Unhealthy by pod %s at %s; no report since, hold time ended at %s",
			r.Pod, r.Last.UTC().Format(time.RFC3339), r.Since.UTC().Format(time.RFC3339))
	}
	detail := fmt.Sprintf("reported by pod %s at %s", r.Pod, r.Since.UTC().Format(time.RFC3339))
	if r.Message != "" {
		msg := r.Message
		if len(msg) > maxMessage {
			// Cut on a character boundary: half a UTF-8 character would
			// be written as U+FFFD and never read back equal, so the
			// publisher would rewrite the pool forever.
			msg = strings.ToValidUTF8(msg[:maxMessage], "") + "..."
		}
		detail += ": " + msg
	}
	return detail
}

// Options configure a Cache.
type Options struct {
	// HoldTime is how long a device stays Unhealthy after its last Unhealthy
	// report (deviceHealth.unhealthyHoldTime).
	HoldTime time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Resolver turns resource IDs into devices; see Resolver.
	Resolver Resolver
	// OnChange is told which devices changed health, including Unhealthy
	// devices whose hold time ended. It is called without locks held, from
	// the informer's or the cache's goroutine, and must not block for long.
	OnChange func(devices []Device)
}

// Cache is the device health cache. Its methods are safe for concurrent use.
type Cache struct {
	opts    Options
	wake    chan struct{}
	ignored ignoredIDs

	mu        sync.RWMutex
	devices   map[Device]*entry
	unhealthy map[Device]*entry // Unhealthy, possibly past the hold time until Run expires them
}

type entry struct {
	Report
	// id is the allocator's interned form of the device, made once.
	id structured.DeviceID
}

// New returns an empty cache. Run expires Unhealthy reports.
func New(opts Options) *Cache {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Cache{
		opts:      opts,
		wake:      make(chan struct{}, 1),
		devices:   map[Device]*entry{},
		unhealthy: map[Device]*entry{},
	}
}

// HoldTime is the configured hold time.
func (c *Cache) HoldTime() time.Duration { return c.opts.HoldTime }

// expired reports whether an Unhealthy entry is past its hold time.
func (c *Cache) expired(e *entry, now time.Time) bool {
	return !now.Before(e.Last.Add(c.opts.HoldTime))
}

// effective returns the report as of now: an Unhealthy report past its
// hold time reads as Unknown even before Run has expired it.
func (c *Cache) effective(e *entry, now time.Time) Report {
	r := e.Report
	if r.Health == v1.ResourceHealthStatusUnhealthy && c.expired(e, now) {
		r.Health, r.Since, r.Expired = v1.ResourceHealthStatusUnknown, r.Last.Add(c.opts.HoldTime), true
	}
	return r
}

// Get returns what is known of a device. The side cache asks this for every
// device it counts, so a device without reports costs one map lookup.
func (c *Cache) Get(d Device) (Report, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.devices[d]
	if !ok {
		return Report{}, false
	}
	return c.effective(e, c.opts.Clock.Now()), true
}

// InsertUnhealthy adds every device that is Unhealthy now to set and
// returns how many it added. This is on the scheduling path: one map
// insert per Unhealthy device, nothing else.
func (c *Cache) InsertUnhealthy(set sets.Set[structured.DeviceID]) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.unhealthy) == 0 {
		return 0
	}
	now := c.opts.Clock.Now()
	n := 0
	for _, e := range c.unhealthy {
		if !c.expired(e, now) {
			set.Insert(e.id)
			n++
		}
	}
	return n
}

// Unhealthy returns the reports of every device that is Unhealthy now.
func (c *Cache) Unhealthy() []Report {
	now := c.opts.Clock.Now()
	c.mu.RLock()
	defer c.mu.RUnlock()
	reports := make([]Report, 0, len(c.unhealthy))
	for _, e := range c.unhealthy {
		if !c.expired(e, now) {
			reports = append(reports, e.Report)
		}
	}
	return reports
}

// report is one resource health entry of a pod, resolved to a device.
type report struct {
	device  Device
	health  v1.ResourceHealthStatus
	message string
}

// ObservePod records the health reports in a pod's status. old is the
// previous version of the pod, or nil when the pod is new to the caller.
// An entry counts as a new report when it is new or changed, or when the
// pod is not terminal: kubelet re-asserts the health of the devices of pods
// it runs with every status update, so a crash-looping pod keeps its broken
// device Unhealthy. The frozen status of a finished pod does not.
func (c *Cache) ObservePod(logger klog.Logger, old, pod *v1.Pod) {
	reports := c.reportsOf(logger, pod)
	if len(reports) == 0 {
		return
	}
	if old != nil && (pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed) {
		before := sets.New(c.reportsOf(logger, old)...)
		fresh := reports[:0]
		for _, r := range reports {
			if !before.Has(r) {
				fresh = append(fresh, r)
			}
		}
		reports = fresh
	}
	podName := pod.Namespace + "/" + pod.Name
	now := c.opts.Clock.Now()
	var changed []Device
	c.mu.Lock()
	for _, r := range reports {
		if c.applyLocked(r, podName, pod.Spec.NodeName, now) {
			changed = append(changed, r.device)
		}
	}
	c.mu.Unlock()
	if len(changed) == 0 {
		return
	}
	for _, d := range changed {
		r, _ := c.Get(d)
		logger.V(2).Info("Device health changed", "device", d, "health", r.Health, "pod", podName, "message", r.Message)
	}
	c.poke()
	if c.opts.OnChange != nil {
		c.opts.OnChange(changed)
	}
}

// applyLocked records one report and says whether the device's health (or
// what a person reads about it) changed.
func (c *Cache) applyLocked(r report, pod, node string, now time.Time) bool {
	e, ok := c.devices[r.device]
	if !ok {
		e = &entry{
			Report: Report{Device: r.device},
			id:     structured.MakeDeviceID(r.device.Driver, r.device.Pool, r.device.Name),
		}
		c.devices[r.device] = e
	}
	current := c.effective(e, now)
	if ok && r.health != v1.ResourceHealthStatusHealthy && r.health != v1.ResourceHealthStatusUnhealthy &&
		current.Health == v1.ResourceHealthStatusUnhealthy {
		// Unknown says nothing new about a device known to be broken: it
		// stays Unhealthy until a Healthy report or the hold time.
		return false
	}
	health := r.health
	if health != v1.ResourceHealthStatusHealthy && health != v1.ResourceHealthStatusUnhealthy {
		health = v1.ResourceHealthStatusUnknown
	}
	changed := !ok || current.Health != health || current.Expired || e.Message != r.message || e.Pod != pod
	if changed {
		e.Since = now
	}
	e.Health, e.Last, e.Pod, e.Node, e.Message, e.Expired = health, now, pod, node, r.message, false
	if health == v1.ResourceHealthStatusUnhealthy {
		c.unhealthy[r.device] = e
	} else {
		delete(c.unhealthy, r.device)
	}
	return changed
}

// poke makes Run look at the hold times again.
func (c *Cache) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run expires Unhealthy reports at the end of their hold time, telling
// OnChange, until ctx ends. Without it, expired devices still read as
// Unknown, but nobody is told.
func (c *Cache) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		next := c.expire(logger)
		var t clock.Timer
		var timer <-chan time.Time
		if !next.IsZero() {
			t = c.opts.Clock.NewTimer(next.Sub(c.opts.Clock.Now()))
			timer = t.C()
		}
		select {
		case <-ctx.Done():
		case <-c.wake:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// expire turns Unhealthy reports past their hold time into Unknown ones and
// returns when the next one is due (zero: none).
func (c *Cache) expire(logger klog.Logger) time.Time {
	now := c.opts.Clock.Now()
	var expired []Device
	var next time.Time
	c.mu.Lock()
	for d, e := range c.unhealthy {
		if c.expired(e, now) {
			e.Report = c.effective(e, now)
			delete(c.unhealthy, d)
			expired = append(expired, d)
			continue
		}
		if due := e.Last.Add(c.opts.HoldTime); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	c.mu.Unlock()
	for _, d := range expired {
		logger.V(2).Info("Device is no longer held Unhealthy: its hold time ended without a new report", "device", d, "holdTime", c.opts.HoldTime)
	}
	if len(expired) > 0 && c.opts.OnChange != nil {
		c.opts.OnChange(expired)
	}
	return next
}
