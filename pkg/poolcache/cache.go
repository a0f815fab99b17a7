// Package poolcache is drascope's side cache: a live availability snapshot of
// every DRA pool, kept by recomputing only the pools that changed.
//
// It is fed by informers (ResourceSlices, ResourceClaims, DeviceTaintRules)
// and by the scheduler's in-flight allocations, reported through the DRAScope
// decorator of the DRA manager, so a device the scheduler has just reserved
// shows as allocated before the claim status is written. Feeding it only
// records the change and marks pools dirty; the scheduling path waits for a
// recompute only where device-aware scoring asks for one (Sync in DRAScope's
// PreScore). It knows nothing of HTTP, CRDs or metrics: publishers
// subscribe.
package poolcache

import (
	"context"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/pkg/drausage"
)

// Snapshot is the availability of one pool at one point. Its Conflicts are
// only those confirmed (Cache.Confirm) with the claims they now involve;
// Suspected holds every conflict the cache's own view shows, which its lag
// or in-flight allocations can make up.
type Snapshot struct {
	drausage.PoolUsage
	// Suspected are the conflicts computed from the cache's inputs,
	// confirmed or not.
	Suspected []drausage.Conflict
	// Version increases with every snapshot the cache makes, across pools.
	Version uint64
	// ComputedAt is when the snapshot was made.
	ComputedAt time.Time
	// ChangedAt is when the oldest change it was the first to reflect happened.
	ChangedAt time.Time
}

// Listener is told which pools have new snapshots (or were removed). It is
// called from whichever goroutine ran Sync (the cache's worker, or the
// scheduling path when scoring asks for fresh snapshots) or Confirm, and
// must not block for long.
type Listener func(changed []drausage.PoolID)

// Options configure a Cache.
type Options struct {
	// Usage is handed to drausage for every recompute.
	Usage drausage.Options
	// Clock, for tests; the real clock when nil.
	Clock clock.PassiveClock
	// Observe, when set, receives each recompute: the pool, its size, how
	// long computing took and how long after the change the snapshot came.
	Observe func(pool drausage.PoolID, devices int, compute, delay time.Duration)
}

// Cache holds the inputs of every pool and its latest snapshot.
type Cache struct {
	opts  Options
	clock clock.PassiveClock
	wake  chan struct{}
	// syncMu serializes Sync, so that a slower recompute never replaces a
	// newer snapshot.
	syncMu sync.Mutex

	mu sync.Mutex
	// slices by pool, then by slice name; slicePool: the pool of each slice.
	slices    map[drausage.PoolID]map[string]*resourceapi.ResourceSlice
	slicePool map[string]drausage.PoolID
	// Claims as the informer has them, and the scheduler's in-flight
	// versions: pending allocations (Reserve until PreBind) and claims
	// written but not yet seen by the informer. The effective claim is the
	// first of assumed, pending, informer that exists.
	informer map[types.UID]*resourceapi.ResourceClaim
	pending  map[types.UID]*resourceapi.ResourceClaim
	assumed  map[types.UID]*resourceapi.ResourceClaim
	// claimPools: pools the effective claim names; claimsByPool: the reverse.
	claimPools   map[types.UID][]drausage.PoolID
	claimsByPool map[drausage.PoolID]sets.Set[types.UID]
	// allocatedIn indexes the claims whose effective version holds an
	// allocation by namespace (device quotas count them), and
	// claimNamespace is each such claim's.
	allocatedIn    map[string]sets.Set[types.UID]
	claimNamespace map[types.UID]string
	// slicesChanged: SlicesChanged.
	slicesChanged uint64
	// onReleased: OnReleased.
	onReleased func(namespace string)
	taintRules map[string]*resourceapi.DeviceTaintRule
	// confirmed holds, per pool and conflict key, the claims the API
	// showed taking part; a key is dropped once the conflict is no longer
	// suspected.
	confirmed map[drausage.PoolID]map[string]sets.Set[types.UID]
	// dirty pools and when their oldest unreflected change happened.
	dirty     map[drausage.PoolID]time.Time
	snapshots map[drausage.PoolID]*Snapshot
	// onNode indexes the snapshots of node-local pools by node.
	onNode    map[string]sets.Set[drausage.PoolID]
	version   uint64
	listeners []Listener
}

// New returns an empty cache; Run computes snapshots.
func New(opts Options) *Cache {
	c := &Cache{
		opts:           opts,
		clock:          opts.Clock,
		wake:           make(chan struct{}, 1),
		slices:         map[drausage.PoolID]map[string]*resourceapi.ResourceSlice{},
		slicePool:      map[string]drausage.PoolID{},
		informer:       map[types.UID]*resourceapi.ResourceClaim{},
		pending:        map[types.UID]*resourceapi.ResourceClaim{},
		assumed:        map[types.UID]*resourceapi.ResourceClaim{},
		claimPools:     map[types.UID][]drausage.PoolID{},
		claimsByPool:   map[drausage.PoolID]sets.Set[types.UID]{},
		allocatedIn:    map[string]sets.Set[types.UID]{},
		claimNamespace: map[types.UID]string{},
		taintRules:     map[string]*resourceapi.DeviceTaintRule{},
		confirmed:      map[drausage.PoolID]map[string]sets.Set[types.UID]{},
		dirty:          map[drausage.PoolID]time.Time{},
		snapshots:      map[drausage.PoolID]*Snapshot{},
		onNode:         map[string]sets.Set[drausage.PoolID]{},
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	return c
}

// Subscribe registers a listener for snapshot changes.
func (c *Cache) Subscribe(l Listener) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, l)
}

// Get returns the latest snapshot of a pool, or nil. Snapshots are shared:
// do not modify them.
func (c *Cache) Get(id drausage.PoolID) *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshots[id]
}

// OnNode returns the latest snapshots of the pools local to node, in no
// particular order: scoring reads a few nodes' pools, not every pool.
func (c *Cache) OnNode(node string) []*Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.onNode[node]
	out := make([]*Snapshot, 0, len(ids))
	for id := range ids {
		out = append(out, c.snapshots[id])
	}
	return out
}

// setSnapshotLocked replaces (or, with nil, removes) a pool's snapshot and
// keeps the by-node index in step.
func (c *Cache) setSnapshotLocked(id drausage.PoolID, snap *Snapshot) {
	if old := c.snapshots[id]; old != nil && old.NodeName != "" {
		c.onNode[old.NodeName].Delete(id)
		if c.onNode[old.NodeName].Len() == 0 {
			delete(c.onNode, old.NodeName)
		}
	}
	if snap == nil {
		delete(c.snapshots, id)
		return
	}
	c.snapshots[id] = snap
	if snap.NodeName != "" {
		if c.onNode[snap.NodeName] == nil {
			c.onNode[snap.NodeName] = sets.New[drausage.PoolID]()
		}
		c.onNode[snap.NodeName].Insert(id)
	}
}

// List returns the latest snapshot of every pool, in no particular order.
func (c *Cache) List() []*Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Snapshot, 0, len(c.snapshots))
	for _, s := range c.snapshots {
		out = append(out, s)
	}
	return out
}

// Confirm records that conflicts of a pool were checked against the API and
// are real, with the claims the API showed taking part. The pool's snapshot
// and later ones report a conflict while it stays suspected and involves no
// claim beyond those; one that is no longer suspected now is not recorded.
// Nothing is recomputed: the new snapshot is the current one with its
// conflicts filtered again, and listeners are told of it.
func (c *Cache) Confirm(id drausage.PoolID, conflicts ...drausage.Conflict) {
	c.mu.Lock()
	snap := c.snapshots[id]
	if snap == nil {
		c.mu.Unlock()
		return
	}
	suspected := drausage.ConflictKeys(snap.Suspected)
	for _, conflict := range conflicts {
		if !suspected.Has(conflict.Key()) {
			continue
		}
		if c.confirmed[id] == nil {
			c.confirmed[id] = map[string]sets.Set[types.UID]{}
		}
		uids := sets.New[types.UID]()
		for _, ref := range conflict.Claims {
			uids.Insert(ref.UID)
		}
		c.confirmed[id][conflict.Key()] = uids
	}
	refiltered := *snap
	c.keepConfirmedLocked(&refiltered)
	// The change this snapshot is the first to show is the confirmation,
	// now: the publisher's deadline for it starts here, not at the older
	// change the snapshot it refilters showed.
	refiltered.ChangedAt = c.clock.Now()
	c.version++
	refiltered.Version = c.version
	c.setSnapshotLocked(id, &refiltered)
	listeners := c.listeners
	c.mu.Unlock()
	for _, l := range listeners {
		l([]drausage.PoolID{id})
	}
}

// Slices returns the slices of a pool as the cache has them.
func (c *Cache) Slices(id drausage.PoolID) []*resourceapi.ResourceSlice {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*resourceapi.ResourceSlice, 0, len(c.slices[id]))
	for _, slice := range c.slices[id] {
		out = append(out, slice)
	}
	return out
}

// Version is the version of the newest snapshot.
func (c *Cache) Version() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// SlicesChanged counts the changes of slices the cache has recorded: a
// device looked up (Device) before a change may read differently after.
func (c *Cache) SlicesChanged() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slicesChanged
}

// SetSlice records a ResourceSlice, added or updated.
func (c *Cache) SetSlice(slice *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slicesChanged++
	id := drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}
	// A slice may move to another pool in an update; forget its old place.
	if old, ok := c.slicePool[slice.Name]; ok && old != id {
		c.removeSliceLocked(old, slice.Name)
	}
	c.slicePool[slice.Name] = id
	if c.slices[id] == nil {
		c.slices[id] = map[string]*resourceapi.ResourceSlice{}
	}
	c.slices[id][slice.Name] = slice
	c.markLocked(id)
}

// DeleteSlice forgets a ResourceSlice.
func (c *Cache) DeleteSlice(slice *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeSliceLocked(drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}, slice.Name)
}

func (c *Cache) removeSliceLocked(id drausage.PoolID, name string) {
	if _, ok := c.slices[id][name]; !ok {
		return
	}
	c.slicesChanged++
	delete(c.slices[id], name)
	delete(c.slicePool, name)
	if len(c.slices[id]) == 0 {
		delete(c.slices, id)
	}
	c.markLocked(id)
}

// SetClaim records a ResourceClaim from the informer, added or updated. An
// assumed version that the informer has now caught up with is dropped.
func (c *Cache) SetClaim(claim *resourceapi.ResourceClaim) {
	c.changeClaim(claim.UID, func() {
		c.informer[claim.UID] = claim
		if assumed, ok := c.assumed[claim.UID]; ok && !Newer(assumed, claim) {
			delete(c.assumed, claim.UID)
		}
	})
}

// DeleteClaim forgets a ResourceClaim, including any in-flight version.
func (c *Cache) DeleteClaim(claim *resourceapi.ResourceClaim) {
	c.changeClaim(claim.UID, func() {
		delete(c.informer, claim.UID)
		delete(c.pending, claim.UID)
		delete(c.assumed, claim.UID)
	})
}

// changeClaim applies an informer event to a claim's versions, re-indexes
// the claim, and tells OnReleased's fn, outside the lock, when the change
// took its allocation out of AllocatedIn.
func (c *Cache) changeClaim(uid types.UID, change func()) {
	c.mu.Lock()
	namespace, held := c.claimNamespace[uid]
	change()
	c.refreshClaimLocked(uid)
	_, still := c.claimNamespace[uid]
	onReleased := c.onReleased
	c.mu.Unlock()
	if held && !still && onReleased != nil {
		onReleased(namespace)
	}
}

// OnReleased registers fn, told the namespace of a claim whose release
// (deallocated, or deleted while allocated) the informer delivered, once
// AllocatedIn no longer counts it; fn runs outside the cache's lock. Set
// it before the informers start.
func (c *Cache) OnReleased(fn func(namespace string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onReleased = fn
}

// PendingAllocation records an allocation the scheduler reserved and will
// write in PreBind (SignalClaimPendingAllocation).
func (c *Cache) PendingAllocation(claim *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[claim.UID] = claim
	c.refreshClaimLocked(claim.UID)
}

// PendingAllocationRemoved forgets a pending allocation (written, or given up).
func (c *Cache) PendingAllocationRemoved(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[uid]; !ok {
		return
	}
	delete(c.pending, uid)
	c.refreshClaimLocked(uid)
}

// Assumed records a claim the scheduler has just written and the informer
// has not delivered yet (AssumeClaimAfterAPICall).
func (c *Cache) Assumed(claim *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if informer, ok := c.informer[claim.UID]; ok && !Newer(claim, informer) {
		return
	}
	c.assumed[claim.UID] = claim
	c.refreshClaimLocked(claim.UID)
}

// AssumeRestored drops the assumed version of a claim whose write failed.
func (c *Cache) AssumeRestored(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, claim := range c.assumed {
		if claim.Namespace == namespace && claim.Name == name {
			delete(c.assumed, uid)
			c.refreshClaimLocked(uid)
		}
	}
}

// SetDeviceTaintRule records a DeviceTaintRule, added or updated.
func (c *Cache) SetDeviceTaintRule(rule *resourceapi.DeviceTaintRule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.taintRules[rule.Name]
	c.taintRules[rule.Name] = rule
	c.markRuleLocked(old)
	c.markRuleLocked(rule)
}

// HasPool reports whether the cache holds a slice of the pool, whether or
// not its snapshot has been computed yet.
func (c *Cache) HasPool(id drausage.PoolID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.slices[id]) > 0
}

// HasDriver reports whether the cache holds a slice of driver.
func (c *Cache) HasDriver(driver string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.slices {
		if id.Driver == driver {
			return true
		}
	}
	return false
}

// Invalidate marks pools for recompute because an input the cache does not
// hold changed: what Options.Usage.Health says of one of their devices.
func (c *Cache) Invalidate(ids ...drausage.PoolID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if _, ok := c.slices[id]; ok {
			c.markLocked(id)
		}
	}
}

// DeleteDeviceTaintRule forgets a DeviceTaintRule.
func (c *Cache) DeleteDeviceTaintRule(rule *resourceapi.DeviceTaintRule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.taintRules, rule.Name)
	c.markRuleLocked(rule)
}

// markRuleLocked marks the pools a rule's selector can reach.
func (c *Cache) markRuleLocked(rule *resourceapi.DeviceTaintRule) {
	if rule == nil || rule.Spec.DeviceSelector == nil {
		return
	}
	sel := rule.Spec.DeviceSelector
	for id := range c.slices {
		if (sel.Driver == nil || *sel.Driver == id.Driver) && (sel.Pool == nil || *sel.Pool == id.Pool) {
			c.markLocked(id)
		}
	}
}

// refreshClaimLocked re-indexes a claim under the pools its effective
// version names, and marks both its old and new pools dirty.
func (c *Cache) refreshClaimLocked(uid types.UID) {
	for _, id := range c.claimPools[uid] {
		c.claimsByPool[id].Delete(uid)
		if c.claimsByPool[id].Len() == 0 {
			delete(c.claimsByPool, id)
		}
		c.markLocked(id)
	}
	claim := c.effectiveLocked(uid)
	c.indexNamespaceLocked(uid, claim)
	pools := drausage.PoolsOf(claim)
	if len(pools) == 0 {
		delete(c.claimPools, uid)
		return
	}
	c.claimPools[uid] = pools
	for _, id := range pools {
		if c.claimsByPool[id] == nil {
			c.claimsByPool[id] = sets.New[types.UID]()
		}
		c.claimsByPool[id].Insert(uid)
		c.markLocked(id)
	}
}

// indexNamespaceLocked files the claim under its namespace while its
// effective version holds an allocation.
func (c *Cache) indexNamespaceLocked(uid types.UID, claim *resourceapi.ResourceClaim) {
	if namespace, ok := c.claimNamespace[uid]; ok {
		c.allocatedIn[namespace].Delete(uid)
		if c.allocatedIn[namespace].Len() == 0 {
			delete(c.allocatedIn, namespace)
		}
		delete(c.claimNamespace, uid)
	}
	if claim == nil || claim.Status.Allocation == nil {
		return
	}
	if c.allocatedIn[claim.Namespace] == nil {
		c.allocatedIn[claim.Namespace] = sets.New[types.UID]()
	}
	c.allocatedIn[claim.Namespace].Insert(uid)
	c.claimNamespace[uid] = claim.Namespace
}

// AllocatedIn returns the claims of the namespace that hold an
// allocation, as the scheduler sees them: written, or in flight (reserved
// and not yet written, or written and not yet seen by the informer).
func (c *Cache) AllocatedIn(namespace string) []*resourceapi.ResourceClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	uids := c.allocatedIn[namespace]
	out := make([]*resourceapi.ResourceClaim, 0, uids.Len())
	for uid := range uids {
		out = append(out, c.effectiveLocked(uid))
	}
	return out
}

// Device returns the device as its pool's newest slices publish it, nil
// when the cache knows no such device.
func (c *Cache) Device(id structured.DeviceID) *resourceapi.Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found *resourceapi.Device
	generation := int64(-1)
	for _, slice := range c.slices[drausage.PoolID{Driver: id.Driver.String(), Pool: id.Pool.String()}] {
		if slice.Spec.Pool.Generation < generation {
			continue
		}
		for i := range slice.Spec.Devices {
			if slice.Spec.Devices[i].Name == id.Device.String() {
				found, generation = &slice.Spec.Devices[i], slice.Spec.Pool.Generation
			}
		}
	}
	return found
}

func (c *Cache) effectiveLocked(uid types.UID) *resourceapi.ResourceClaim {
	if claim, ok := c.assumed[uid]; ok {
		return claim
	}
	if claim, ok := c.pending[uid]; ok {
		return claim
	}
	return c.informer[uid]
}

func (c *Cache) markLocked(id drausage.PoolID) {
	if _, ok := c.dirty[id]; !ok {
		c.dirty[id] = c.clock.Now()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Newer reports whether a has a higher resourceVersion than b; when the
// versions cannot be compared, a is taken as newer only if they differ. It
// is the rule by which the cache lets the informer's copy of a claim replace
// the scheduler's assumed one, and the publisher its own last write.
func Newer(a, b metav1.Object) bool {
	cmp, err := resourceversion.CompareResourceVersion(a.GetResourceVersion(), b.GetResourceVersion())
	if err != nil {
		return a.GetResourceVersion() != b.GetResourceVersion()
	}
	return cmp > 0
}

// Run recomputes dirty pools until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		if changed := c.Sync(); len(changed) > 0 {
			logger.V(5).Info("Pool snapshots updated", "pools", len(changed))
		}
	}
}

// poolInput is what recomputing one pool needs, copied out under the lock.
type poolInput struct {
	id        drausage.PoolID
	changedAt time.Time
	slices    []*resourceapi.ResourceSlice
	claims    []*resourceapi.ResourceClaim
}

// Sync recomputes every dirty pool now and notifies listeners; it returns
// the pools whose snapshots changed. Run calls it; tests may too.
func (c *Cache) Sync() []drausage.PoolID {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.mu.Lock()
	if len(c.dirty) == 0 {
		c.mu.Unlock()
		return nil
	}
	inputs := make([]poolInput, 0, len(c.dirty))
	for id, changedAt := range c.dirty {
		in := poolInput{id: id, changedAt: changedAt}
		for _, slice := range c.slices[id] {
			in.slices = append(in.slices, slice)
		}
		for uid := range c.claimsByPool[id] {
			in.claims = append(in.claims, c.effectiveLocked(uid))
		}
		inputs = append(inputs, in)
	}
	clear(c.dirty)
	opts := c.opts.Usage
	if len(c.taintRules) > 0 {
		opts.DeviceTaintRules = make([]*resourceapi.DeviceTaintRule, 0, len(c.taintRules))
		for _, rule := range c.taintRules {
			opts.DeviceTaintRules = append(opts.DeviceTaintRules, rule)
		}
	}
	c.mu.Unlock()

	// Compute outside the lock: the scheduling path may keep feeding.
	results := make([]*Snapshot, len(inputs))
	for i, in := range inputs {
		if len(in.slices) == 0 {
			continue
		}
		start := c.clock.Now()
		usage := drausage.ComputePool(in.id, in.slices, in.claims, opts)
		now := c.clock.Now()
		results[i] = &Snapshot{PoolUsage: usage, Suspected: usage.Conflicts, ComputedAt: now, ChangedAt: in.changedAt}
		if c.opts.Observe != nil {
			c.opts.Observe(in.id, len(usage.Devices), now.Sub(start), now.Sub(in.changedAt))
		}
	}

	c.mu.Lock()
	changed := make([]drausage.PoolID, 0, len(inputs))
	for i, in := range inputs {
		switch {
		case results[i] != nil:
			c.keepConfirmedLocked(results[i])
			c.version++
			results[i].Version = c.version
			c.setSnapshotLocked(in.id, results[i])
		case c.snapshots[in.id] != nil:
			c.setSnapshotLocked(in.id, nil)
			delete(c.confirmed, in.id)
		default:
			delete(c.confirmed, in.id)
			continue
		}
		changed = append(changed, in.id)
	}
	listeners := c.listeners
	c.mu.Unlock()

	if len(changed) > 0 {
		for _, l := range listeners {
			l(changed)
		}
	}
	return changed
}

// keepConfirmedLocked reports in the snapshot only the suspected conflicts
// that were confirmed with every claim they now involve, and forgets
// confirmations of conflicts that are gone, so that one coming back is
// checked again.
func (c *Cache) keepConfirmedLocked(snap *Snapshot) {
	confirmed := c.confirmed[snap.PoolID]
	snap.Conflicts = nil
	if len(confirmed) == 0 {
		return
	}
	still := map[string]sets.Set[types.UID]{}
	for _, conflict := range snap.Suspected {
		uids, ok := confirmed[conflict.Key()]
		if !ok {
			continue
		}
		still[conflict.Key()] = uids
		if slices.ContainsFunc(conflict.Claims, func(ref drausage.ClaimRef) bool { return !uids.Has(ref.UID) }) {
			// A claim joined since: check again.
			continue
		}
		snap.Conflicts = append(snap.Conflicts, conflict)
	}
	if len(still) == 0 {
		delete(c.confirmed, snap.PoolID)
		return
	}
	c.confirmed[snap.PoolID] = still
}

// Unconfirmed returns the suspected conflicts not reported as confirmed.
func (s *Snapshot) Unconfirmed() []drausage.Conflict {
	if len(s.Suspected) == len(s.Conflicts) {
		return nil
	}
	confirmed := drausage.ConflictKeys(s.Conflicts)
	var out []drausage.Conflict
	for _, conflict := range s.Suspected {
		if !confirmed.Has(conflict.Key()) {
			out = append(out, conflict)
		}
	}
	return out
}

// Sizes returns how many entries each long-lived map holds, by name, for
// the churn soak (draruntime.Runtime.StateSizes): each must follow the slices, claims
// and rules that exist, not those that ever existed.
func (c *Cache) Sizes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]int{
		"poolcache_pools":            len(c.slices),
		"poolcache_slices":           len(c.slicePool),
		"poolcache_claims":           len(c.informer),
		"poolcache_pending":          len(c.pending),
		"poolcache_assumed":          len(c.assumed),
		"poolcache_claim_pools":      len(c.claimPools),
		"poolcache_pool_claims":      len(c.claimsByPool),
		"poolcache_namespaces":       len(c.allocatedIn),
		"poolcache_claim_namespaces": len(c.claimNamespace),
		"poolcache_taint_rules":      len(c.taintRules),
		"poolcache_confirmed":        len(c.confirmed),
		"poolcache_dirty":            len(c.dirty),
		"poolcache_snapshots":        len(c.snapshots),
		"poolcache_nodes":            len(c.onNode),
	}
}
