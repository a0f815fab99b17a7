// Package health remembers the device health that kubelet reports in pod
// status (KEP-4680): status.containerStatuses[].allocatedResourcesStatus, and
// the same list in init and ephemeral container statuses. DRA entries are
// named "claim:<claim>" or "claim:<claim>/<request>"; each resource is
// "<driver>/<pool>/<device>" (or a CDI device ID, see resolve.go).
//
// A report counts only when it comes from a pod that holds the device: one
// of the pod's claims, reserved for the pod, has it in its allocation (see
// pods.go). A device is Unhealthy while some running pod's current status
// reports it Unhealthy; when the last such pod finishes, is deleted or
// reports otherwise, the hold time starts (for a finished pod, at its
// finish), and at its end the device is Unknown. A new Healthy report from a holder ends at once its own
// Unhealthy report and those of holders that no longer run, never that of
// another running holder.
// Reports outlive their pods by the hold time: the pod that found a broken
// device is usually deleted before its replacement is scheduled.
package health

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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

// Compare orders devices by their names as written, for sorted output.
func (d Device) Compare(other Device) int { return strings.Compare(d.String(), other.String()) }

// Report is what the cache knows of one device.
type Report struct {
	Device Device
	// Health is Healthy, Unhealthy or Unknown.
	Health v1.ResourceHealthStatus
	// Pod ("namespace/name"), PodUID and Node reported the health last.
	Pod    string
	PodUID types.UID
	Node   string
	// Message is kubelet's message, if the driver gave one.
	Message string
	// Since is when the device entered its current health.
	Since time.Time
	// HeldUntil is set while an Unhealthy device is held with no pod
	// reporting it any more: it is Unhealthy until then.
	HeldUntil time.Time
	// Expired is set when an Unhealthy device's hold time ended; Since is
	// then the end of the hold time.
	Expired bool
}

// maxMessage bounds kubelet's message in Detail, so that the detail fits in
// a ResourcePool device reason.
const maxMessage = 256

// Detail says how, when and why the health was reported, for people who
// may read cluster-scoped objects (ResourcePools, kubectl dra): the node
// whose kubelet reported it, never the pod, which belongs to a tenant.
func (r Report) Detail() string {
	return r.detail("kubelet on node " + r.Node)
}

// DetailFor is Detail for a reader in namespace (a pending pod's message):
// it names the reporting pod when the pod is in that namespace.
func (r Report) DetailFor(namespace string) string {
	if ns, _, ok := strings.Cut(r.Pod, "/"); ok && ns == namespace {
		return r.detail("pod " + r.Pod)
	}
	return r.Detail()
}

func (r Report) detail(reporter string) string {
	if r.Node == "" && strings.HasPrefix(reporter, "kubelet") {
		reporter = "kubelet"
	}
	if r.Expired {
		return fmt.Sprintf("last reported Unhealthy by %s; no pod reports it, hold time ended at %s",
			reporter, r.Since.UTC().Format(time.RFC3339))
	}
	detail := fmt.Sprintf("reported by %s at %s", reporter, r.Since.UTC().Format(time.RFC3339))
	if r.Message != "" {
		detail += ": " + truncate(r.Message, maxMessage)
	}
	if !r.HeldUntil.IsZero() {
		detail += fmt.Sprintf(" (held until %s)", r.HeldUntil.UTC().Format(time.RFC3339))
	}
	return detail
}

// truncate cuts s to at most n bytes on a character boundary: half a UTF-8
// character would be written as U+FFFD and never read back equal, so a
// writer comparing what it wrote would rewrite forever.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// Options configure a Cache.
type Options struct {
	// HoldTime is how long a device stays Unhealthy once no pod reports it
	// Unhealthy (deviceHealth.unhealthyHoldTime).
	HoldTime time.Duration
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Resolver turns resource IDs into devices and finds the claims that
	// say which devices a pod holds; see Resolver.
	Resolver Resolver
	// DeviceExists reports whether a device is in some ResourceSlice; Run
	// forgets devices that are not, unless a pod still reports them. Nil:
	// devices are never forgotten.
	DeviceExists func(Device) bool
	// OnChange is told which devices changed health, including Unhealthy
	// devices whose hold time ended. It is called without locks held, from
	// the informer's or the cache's goroutine, and must not block for long.
	OnChange func(devices []Device)
	// OnIgnored is told about each report that is not believed, with why:
	// IgnoredNotHolder or IgnoredUnresolvable.
	OnIgnored func(reason string)
}

// Why a report was not believed (the reason label of
// drascope_device_health_reports_ignored_total).
const (
	// IgnoredNotHolder: the reporting pod does not hold the device.
	IgnoredNotHolder = "NotHolder"
	// IgnoredUnresolvable: the resource ID names no known device.
	IgnoredUnresolvable = "Unresolvable"
)

// Cache is the device health cache. Its methods are safe for concurrent use.
type Cache struct {
	opts      Options
	wake      chan struct{}
	ignored   onceSet
	untrusted onceSet

	mu        sync.RWMutex
	devices   map[Device]*entry
	unhealthy map[Device]*entry // Unhealthy, possibly past the hold time until Run expires them
	// pods are the trusted reports in the current status of each pod.
	pods map[types.UID]podReports
	// holdings are the devices each pod holds, remembered while it runs
	// and for a while after (see pods.go).
	holdings map[types.UID]*holding
	// restored are the reporters named by persisted state (Restore) that
	// no pod event has confirmed yet; see Settle.
	restored map[types.UID]sets.Set[Device]
}

type podReports struct {
	name, node string
	reports    map[Device]report
	// left is when the pod left the scheduler's informer without being
	// seen finished (podLeft); its Unhealthy reports hold nothing since.
	left time.Time
}

type entry struct {
	Report
	// id is the allocator's interned form of the device, made once.
	id structured.DeviceID
	// holders are the pods whose current status reports the device
	// Unhealthy, not superseded by a later Healthy report.
	holders sets.Set[types.UID]
	// absent is set by Run when the device was in no slice at its last
	// sweep; it is forgotten when it still is not at the next.
	absent bool
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
		pods:      map[types.UID]podReports{},
		holdings:  map[types.UID]*holding{},
		restored:  map[types.UID]sets.Set[Device]{},
	}
}

// HoldTime is the configured hold time.
func (c *Cache) HoldTime() time.Duration { return c.opts.HoldTime }

// expired reports whether an Unhealthy entry is past its hold time.
func expired(e *entry, now time.Time) bool {
	return e.holders.Len() == 0 && !e.HeldUntil.IsZero() && !now.Before(e.HeldUntil)
}

// effective returns the report as of now: an Unhealthy report past its
// hold time reads as Unknown even before Run has expired it.
func effective(e *entry, now time.Time) Report {
	r := e.Report
	if r.Health == v1.ResourceHealthStatusUnhealthy && expired(e, now) {
		r.Health, r.Since, r.HeldUntil, r.Expired = v1.ResourceHealthStatusUnknown, r.HeldUntil, time.Time{}, true
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
	return effective(e, c.opts.Clock.Now()), true
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
		if e.Health == v1.ResourceHealthStatusUnhealthy && !expired(e, now) {
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
		if e.Health == v1.ResourceHealthStatusUnhealthy && !expired(e, now) {
			reports = append(reports, e.Report)
		}
	}
	return reports
}

// report is one resource health entry of a pod, resolved to a device.
type report struct {
	health  v1.ResourceHealthStatus
	message string
	// superseded is set on an Unhealthy report once a later Healthy
	// report from a holder ended it: while it stays unchanged, it holds
	// nothing.
	superseded bool
}

// same reports whether two reports say the same.
func (r report) same(other report) bool {
	return r.health == other.health && r.message == other.message
}

// setReports makes the trusted reports of one pod's current status what
// the cache knows of it; nil reports: the pod is gone. It returns the
// devices whose health changed.
func (c *Cache) setReportsLocked(uid types.UID, name, node string, reports map[Device]report, now time.Time) []Device {
	var changed []Device
	before := c.pods[uid].reports
	for d, old := range before {
		if r, ok := reports[d]; ok && r.health == old.health {
			continue
		}
		if old.health == v1.ResourceHealthStatusUnhealthy && c.dropHolderLocked(d, uid, now) {
			changed = append(changed, d)
		}
	}
	wasLeft := !c.pods[uid].left.IsZero()
	for d, r := range reports {
		old, seen := before[d]
		if seen && old.same(r) {
			// Unchanged. It holds the device again only when it comes from
			// a pod that left the scheduler's informer (podLeft dropped
			// it) and is back as finished, unless a Healthy report ended it.
			reports[d] = old
			if !(wasLeft && r.health == v1.ResourceHealthStatusUnhealthy && !old.superseded) {
				continue
			}
		}
		if c.applyLocked(d, r, !seen || old.health != r.health, uid, name, node, now) {
			changed = append(changed, d)
		}
	}
	if reports == nil {
		delete(c.pods, uid)
	} else {
		c.pods[uid] = podReports{name: name, node: node, reports: reports}
	}
	return changed
}

// dropHolderLocked forgets that pod uid reports d Unhealthy; when no pod
// does any more, the hold time starts at from (now, or when a finished
// reporter finished). It reports whether what a person reads about the
// device changed.
func (c *Cache) dropHolderLocked(d Device, uid types.UID, from time.Time) bool {
	e, ok := c.devices[d]
	if !ok || !e.holders.Has(uid) {
		return false
	}
	e.holders.Delete(uid)
	if e.Health != v1.ResourceHealthStatusUnhealthy {
		return false
	}
	if e.holders.Len() == 0 {
		e.HeldUntil = from.Add(c.opts.HoldTime)
		return true
	}
	if e.PodUID != uid {
		return false
	}
	return c.nameHolderLocked(d, e)
}

// nameHolderLocked names one of the device's remaining holders as its
// reporter when the one named no longer is, so that what is persisted
// names a pod that reports it. It reports whether that changed.
func (c *Cache) nameHolderLocked(d Device, e *entry) bool {
	if e.holders.Has(e.PodUID) || e.holders.Len() == 0 {
		return false
	}
	next := sets.List(e.holders)[0]
	if p, ok := c.pods[next]; ok {
		e.Pod, e.PodUID, e.Node, e.Message = p.name, next, p.node, p.reports[d].message
	}
	return true
}

// runningLocked reports whether a pod is known to run: its holding is
// remembered, and it neither finished nor left the informer; or it is a
// reporter restored from persisted state that no pod event has confirmed
// yet (after a restart, its own events may come after another holder's).
func (c *Cache) runningLocked(uid types.UID) bool {
	if _, restored := c.restored[uid]; restored {
		return true
	}
	h := c.holdings[uid]
	return h != nil && !h.finished && h.left.IsZero()
}

func (c *Cache) entryLocked(d Device) *entry {
	e, ok := c.devices[d]
	if !ok {
		e = &entry{
			Report:  Report{Device: d, Health: v1.ResourceHealthStatusUnknown},
			id:      structured.MakeDeviceID(d.Driver, d.Pool, d.Name),
			holders: sets.New[types.UID](),
		}
		c.devices[d] = e
	}
	return e
}

// applyLocked records one report of pod uid; isNew says the pod did not
// report this health for the device before. It reports whether the
// device's health, or what a person reads about it, changed.
func (c *Cache) applyLocked(d Device, r report, isNew bool, uid types.UID, pod, node string, now time.Time) bool {
	e := c.entryLocked(d)
	current := effective(e, now)
	switch r.health {
	case v1.ResourceHealthStatusUnhealthy:
		e.holders.Insert(uid)
		changed := current.Health != v1.ResourceHealthStatusUnhealthy || e.Message != r.message || e.PodUID != uid || !e.HeldUntil.IsZero()
		if current.Health != v1.ResourceHealthStatusUnhealthy {
			e.Since = now
		}
		e.Health, e.Pod, e.PodUID, e.Node, e.Message, e.HeldUntil, e.Expired = r.health, pod, uid, node, r.message, time.Time{}, false
		c.unhealthy[d] = e
		return changed
	case v1.ResourceHealthStatusHealthy:
		if !isNew {
			return false
		}
		// A new Healthy report from a holder ends its own Unhealthy report
		// and those of holders that no longer run (finished, or gone from
		// the informer): the pod that replaced them on the device found
		// it working. A running holder's report stands: one holder cannot
		// clear what another's kubelet reports (docs/device-health.md,
		// "Tenants").
		for holder := range e.holders {
			if holder != uid && c.runningLocked(holder) {
				continue
			}
			if p, ok := c.pods[holder]; ok {
				if old, ok := p.reports[d]; ok {
					old.superseded = true
					p.reports[d] = old
				}
			}
			e.holders.Delete(holder)
		}
		if e.holders.Len() > 0 {
			return c.nameHolderLocked(d, e)
		}
		changed := current.Health != v1.ResourceHealthStatusHealthy || e.PodUID != uid
		if current.Health != v1.ResourceHealthStatusHealthy {
			e.Since = now
		}
		e.Health, e.Pod, e.PodUID, e.Node, e.Message, e.HeldUntil, e.Expired = r.health, pod, uid, node, r.message, time.Time{}, false
		delete(c.unhealthy, d)
		return changed
	default:
		// Unknown says nothing new about a device known to be broken: it
		// stays Unhealthy until a Healthy report or the hold time.
		if current.Health == v1.ResourceHealthStatusUnhealthy {
			return false
		}
		changed := current.Health != v1.ResourceHealthStatusUnknown || current.Expired
		if changed {
			e.Since = now
		}
		e.Health, e.Pod, e.PodUID, e.Node, e.Message, e.HeldUntil, e.Expired = v1.ResourceHealthStatusUnknown, pod, uid, node, r.message, time.Time{}, false
		delete(c.unhealthy, d) // expired, and Run has not got to it yet
		return changed
	}
}

// Clear ends an Unhealthy state that began no later than requestedAt, as
// an operator asked (kubectl dra health clear): every report holding the
// device then is superseded, as by a Healthy report of its own reporter,
// and the device is Unknown. A report made after the request, or a later
// change of a superseded one, counts again. It reports whether it cleared
// anything.
func (c *Cache) Clear(logger klog.Logger, d Device, requestedAt time.Time) bool {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	e, ok := c.devices[d]
	// The request is written to the second (RFC 3339): a report of the
	// same second counts as before it.
	if !ok || effective(e, now).Health != v1.ResourceHealthStatusUnhealthy || e.Since.Truncate(time.Second).After(requestedAt) {
		c.mu.Unlock()
		return false
	}
	// Every pod's report of it, not only the holders': a pod that left the
	// informer unseen finished holds nothing now, but its final status
	// would bring an unchanged report back.
	for _, p := range c.pods {
		if old, ok := p.reports[d]; ok && old.health == v1.ResourceHealthStatusUnhealthy {
			old.superseded = true
			p.reports[d] = old
		}
	}
	for holder := range e.holders {
		delete(c.restored[holder], d)
	}
	e.holders.Clear()
	e.Health, e.Since, e.HeldUntil, e.Expired = v1.ResourceHealthStatusUnknown, now, time.Time{}, false
	e.Message = "cleared by an operator"
	delete(c.unhealthy, d)
	c.mu.Unlock()
	logger.Info("Device is no longer held Unhealthy: an operator cleared it", "device", d, "requestedAt", requestedAt)
	c.changed(logger, []Device{d})
	return true
}

// changed logs, wakes Run and tells OnChange.
func (c *Cache) changed(logger klog.Logger, devices []Device) {
	if len(devices) == 0 {
		return
	}
	for _, d := range devices {
		r, _ := c.Get(d)
		logger.V(2).Info("Device health changed", "device", d, "health", r.Health, "pod", r.Pod, "message", r.Message, "heldUntil", r.HeldUntil)
	}
	c.poke()
	if c.opts.OnChange != nil {
		c.opts.OnChange(devices)
	}
}

// poke makes Run look at the hold times again.
func (c *Cache) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// sweepInterval is how often Run looks for devices that left every slice
// and for holdings of pods long gone.
const sweepInterval = time.Minute

// Run expires Unhealthy devices at the end of their hold time, telling
// OnChange, and forgets what no longer needs remembering, until ctx ends.
// Without it, expired devices still read as Unknown, but nobody is told.
func (c *Cache) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	sweep := c.opts.Clock.NewTicker(sweepInterval)
	defer sweep.Stop()
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
		case <-sweep.C():
			c.sweep(logger)
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// expire turns Unhealthy devices past their hold time into Unknown ones
// and returns when the next one is due (zero: none).
func (c *Cache) expire(logger klog.Logger) time.Time {
	now := c.opts.Clock.Now()
	var done []Device
	var next time.Time
	c.mu.Lock()
	for d, e := range c.unhealthy {
		if expired(e, now) {
			e.Report = effective(e, now)
			delete(c.unhealthy, d)
			done = append(done, d)
			continue
		}
		if e.holders.Len() == 0 && !e.HeldUntil.IsZero() && (next.IsZero() || e.HeldUntil.Before(next)) {
			next = e.HeldUntil
		}
	}
	c.mu.Unlock()
	for _, d := range done {
		logger.V(2).Info("Device is no longer held Unhealthy: no pod reported it Unhealthy for its hold time", "device", d, "holdTime", c.opts.HoldTime)
	}
	if len(done) > 0 && c.opts.OnChange != nil {
		c.opts.OnChange(done)
	}
	return next
}

// sweep forgets devices that were in no slice at two sweeps in a row and
// are not Unhealthy (a node rebooted to fix a GPU drops its slices for a
// while; the GPU must come back withheld), and what is remembered of pods
// gone long enough.
func (c *Cache) sweep(logger klog.Logger) {
	now := c.opts.Clock.Now()
	var candidates []Device
	c.mu.RLock()
	for d, e := range c.devices {
		if e.holders.Len() == 0 && effective(e, now).Health != v1.ResourceHealthStatusUnhealthy {
			candidates = append(candidates, d)
		}
	}
	c.mu.RUnlock()
	// DeviceExists asks the side cache, outside this cache's lock.
	absent := sets.New[Device]()
	if c.opts.DeviceExists != nil {
		for _, d := range candidates {
			if !c.opts.DeviceExists(d) {
				absent.Insert(d)
			}
		}
	}
	var forgotten []Device
	c.mu.Lock()
	for d, e := range c.devices {
		if !absent.Has(d) || e.holders.Len() > 0 || effective(e, now).Health == v1.ResourceHealthStatusUnhealthy {
			e.absent = false
			continue
		}
		if !e.absent {
			e.absent = true
			continue
		}
		delete(c.devices, d)
		delete(c.unhealthy, d)
		forgotten = append(forgotten, d)
	}
	c.pruneLocked(now)
	c.mu.Unlock()
	for _, d := range forgotten {
		logger.V(2).Info("Forgetting the health of a device that no ResourceSlice lists any more", "device", d)
	}
}

// Len returns how many devices and pods the cache remembers, for tests and
// for the note on bounded state.
func (c *Cache) Len() (devices, pods, holdings int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.devices), len(c.pods), len(c.holdings)
}

// Sizes returns how many entries each long-lived map holds, by name, for
// the churn soak (draruntime.Runtime.StateSizes): each must follow what exists, not
// what ever existed.
func (c *Cache) Sizes() map[string]int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return map[string]int{
		"health_devices":   len(c.devices),
		"health_unhealthy": len(c.unhealthy),
		"health_pods":      len(c.pods),
		"health_holdings":  len(c.holdings),
		"health_restored":  len(c.restored),
	}
}
