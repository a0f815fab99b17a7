// Package poolpublisher writes ResourcePool objects (drascope.dev/v1alpha1)
// from the pool side cache: one per pool, only from the replica that leads
// scheduling (the caller decides; see pkg/draruntime), only when the status
// changed, at most once per minimum interval per pool, within a write budget
// until a change has waited half of the delay the publisher aims for, with
// backoff on errors. While publishing it watches the objects it writes, so
// one deleted or edited by hand is put back as soon as the minimum interval
// allows.
package poolpublisher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/informers/externalversions"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolstatus"
)

// Source is what the publisher reads: the side cache.
type Source interface {
	Get(id drausage.PoolID) *poolcache.Snapshot
	// HasPool reports whether the pool has slices, computed or not: a
	// pool without a snapshot is gone only if it has none.
	HasPool(id drausage.PoolID) bool
	List() []*poolcache.Snapshot
	Subscribe(poolcache.Listener)
}

// Options configure a Publisher.
type Options struct {
	// MinInterval is the least time between two writes of one pool's object.
	MinInterval time.Duration
	// MaxWritesPerSecond, when positive, bounds the writes across all pools
	// whose changes are not yet due.
	MaxWritesPerSecond int32
	// MaxDelay, when positive, is the delay from a change to its write that
	// the publisher aims to stay under: a pool whose oldest unwritten change
	// has waited half of it is due, and its writes do not wait for the
	// budget. The other half is for the writes themselves and the queue.
	MaxDelay time.Duration
	// DeviceHealthPolicy is the scheduler's deviceHealth.policy, which the
	// source counted under; it is published in every status.
	DeviceHealthPolicy string
	// Synced reports whether the source has seen every existing slice and
	// claim; orphaned objects are deleted only after that.
	Synced func() bool
	// Observe, when set, receives each sync's duration and error.
	Observe func(duration time.Duration, err error)
	// ObservePublished, when set, receives the delay from the oldest change
	// a successful write reflects to that write.
	ObservePublished func(delay time.Duration)
	// ObserveWrite, when set, is told of every successful write to the API:
	// verb is create, update (of the status) or delete.
	ObserveWrite func(verb string)
	// ObserveOverBudget, when set, is told of every successful write that
	// went ahead of MaxWritesPerSecond because its pool was due.
	ObserveOverBudget func()
	// Clock, for tests.
	Clock clock.WithTicker
}

// Publisher keeps ResourcePool objects in line with the cache.
type Publisher struct {
	source Source
	client versioned.Interface
	// writes are the client's ResourcePool writes, within the budget.
	writes typedv1alpha1.ResourcePoolInterface
	// budget is writes' throttle; nil without MaxWritesPerSecond.
	budget *throttledWrites
	opts   Options
	clock  clock.WithTicker

	mu sync.Mutex
	// term is what one term of holding the lease knows; nil while not
	// publishing. A queue and an informer cannot restart, and what an
	// earlier term knew of the server may be stale.
	term *term
}

// term is one term of publishing.
type term struct {
	queue workqueue.TypedRateLimitingInterface[drausage.PoolID]
	// objects is the informer's index of ResourcePools by pool.
	objects cache.Indexer
	// written: each pool's object as the publisher's last write returned
	// it, until the informer has caught up with that write.
	written map[drausage.PoolID]*v1alpha1.ResourcePool
	// deleted are the UIDs of objects the informer saw deleted, so that a
	// write that returned after the delete is not trusted.
	deleted sets.Set[types.UID]
	// lastWrite per pool, for the minimum interval.
	lastWrite map[drausage.PoolID]time.Time
	// unpublishedSince: the oldest change of each pool that no sync has
	// taken up yet. A sync takes it before it reads the snapshot, so a
	// change during the sync's writes starts a clock of its own.
	unpublishedSince map[drausage.PoolID]time.Time
	// crdGone is set when a write found the CRD no longer served: the term
	// ends, and Run goes back to waiting for it.
	crdGone bool
	// tokenAt: when the budget's token that a pool holds comes.
	tokenAt map[drausage.PoolID]time.Time
	// stop ends the term's workers.
	stop context.CancelFunc
}

// workers is how many pools are synced at once. The deadline, not the
// workers, sets how many writes there are; the workers set how soon a burst
// of due pools (a start, every pool busy at once) gets through when each
// write is a round trip to a loaded apiserver. The client's QPS (the
// scheduler's --kube-api-qps) still bounds them.
const workers = 8

// byPool indexes ResourcePools by the pool their spec names.
const byPool = "pool"

func poolOf(obj *v1alpha1.ResourcePool) drausage.PoolID {
	return drausage.PoolID{Driver: obj.Spec.Driver, Pool: obj.Spec.PoolName}
}

// New returns a publisher; Run starts it.
func New(source Source, client versioned.Interface, opts Options) *Publisher {
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	if opts.Synced == nil {
		opts.Synced = func() bool { return true }
	}
	p := &Publisher{
		source: source,
		client: client,
		writes: client.DrascopeV1alpha1().ResourcePools(),
		opts:   opts,
		clock:  c,
	}
	if opts.MaxWritesPerSecond > 0 {
		p.budget = newThrottledWrites(p.writes, opts.MaxWritesPerSecond, opts.ObserveOverBudget)
		p.writes = p.budget
	}
	source.Subscribe(func(changed []drausage.PoolID) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.term == nil {
			return
		}
		for _, id := range changed {
			if snap := source.Get(id); snap != nil {
				p.term.noteUnwritten(id, snap.ChangedAt)
			}
			p.term.queue.Add(id)
		}
	})
	return p
}

// crdCheckInterval is how often a publisher without the CRD looks again:
// one cheap List (a 404 while the CRD is missing) a second, so that pools
// match the claims within the recovery target (5s, docs/reliability.md)
// of the CRD being installed again. A watch would need more RBAC
// (customresourcedefinitions) for no fewer seconds.
const crdCheckInterval = time.Second

// Run publishes until ctx ends. Call it only in the process that leads
// scheduling; it may be called again for a later term. Without the CRD
// installed it logs one warning, looks again every second, and never disturbs
// scheduling; a CRD deleted while publishing sends it back to that.
func (p *Publisher) Run(ctx context.Context) {
	for p.runTerm(ctx) && ctx.Err() == nil {
		klog.FromContext(ctx).Info("Warning: the ResourcePool CRD (resourcepools.drascope.dev) was deleted; not publishing pool status until it is installed again")
	}
}

// runTerm waits for the CRD and publishes until ctx ends or the CRD goes
// away; it reports the latter.
func (p *Publisher) runTerm(ctx context.Context) (crdGone bool) {
	logger := klog.FromContext(ctx)
	warned := false
	err := wait.PollUntilContextCancel(ctx, crdCheckInterval, true, func(ctx context.Context) (bool, error) {
		_, err := p.client.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{Limit: 1})
		switch {
		case err == nil:
			return true, nil
		case v1alpha1.IsNotServed(err):
			if !warned {
				logger.Info("Warning: the ResourcePool CRD (resourcepools.drascope.dev) is not installed; not publishing pool status until it is. Install manifests/crds, or set poolStatus.publishResourcePools: false", "err", err)
				warned = true
			}
		default:
			logger.Error(err, "Listing ResourcePools; will retry")
		}
		return false, nil
	})
	if err != nil {
		return false
	}

	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[drausage.PoolID](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[drausage.PoolID]{Name: "drascope_resourcepool_publisher", Clock: p.clock},
	)
	defer queue.ShutDown()
	ctx, cancel := context.WithCancel(ctx)
	factory := externalversions.NewSharedInformerFactory(p.client, 0)
	defer func() {
		// Runs before the deferred ShutDown: end the informer first.
		cancel()
		factory.Shutdown()
	}()
	informer := factory.Drascope().V1alpha1().ResourcePools().Informer()
	if err := informer.AddIndexers(cache.Indexers{byPool: func(obj interface{}) ([]string, error) {
		if rp, ok := obj.(*v1alpha1.ResourcePool); ok {
			return []string{poolOf(rp).String()}, nil
		}
		return nil, nil
	}}); err != nil {
		logger.Error(err, "Indexing ResourcePools; not publishing in this term")
		return false
	}
	t := &term{
		queue:            queue,
		objects:          informer.GetIndexer(),
		written:          map[drausage.PoolID]*v1alpha1.ResourcePool{},
		deleted:          sets.New[types.UID](),
		lastWrite:        map[drausage.PoolID]time.Time{},
		unpublishedSince: map[drausage.PoolID]time.Time{},
		tokenAt:          map[drausage.PoolID]time.Time{},
		stop:             cancel,
	}
	if _, err := informer.AddEventHandler(p.watchHandler(t)); err != nil {
		logger.Error(err, "Watching ResourcePools; not publishing in this term")
		return false
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return false
	}
	p.mu.Lock()
	p.term = t
	// Pools the cache knew before the term began have waited since their
	// last change, and are due as any other: the informer's first events
	// queue them before the workers start. The pass below, once the cache
	// has synced, does the same for pools it learns of until then.
	for _, snap := range p.source.List() {
		t.noteUnwritten(snap.PoolID, snap.ChangedAt)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.term == t {
			p.term = nil
		}
		p.mu.Unlock()
	}()
	logger.Info("Publishing pool status as ResourcePool objects", "minInterval", p.opts.MinInterval, "maxWritesPerSecond", p.opts.MaxWritesPerSecond, "maxDelay", p.opts.MaxDelay)

	// Every pool, and every object: objects of pools that no longer exist
	// are orphans. Only once the cache has seen every slice, or every pool
	// would look gone.
	go func() {
		if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) { return p.opts.Synced(), nil }); err != nil {
			return
		}
		for _, obj := range t.objects.List() {
			if rp, ok := obj.(*v1alpha1.ResourcePool); ok {
				queue.Add(poolOf(rp))
			}
		}
		// A pool that changed before the term began has waited since
		// then: it is due as any other, or a new leader (or a first start
		// with many pools) would publish them at the budget's pace.
		for _, snap := range p.source.List() {
			p.mu.Lock()
			t.noteUnwritten(snap.PoolID, snap.ChangedAt)
			p.mu.Unlock()
			queue.Add(snap.PoolID)
		}
	}()

	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for p.processNext(ctx, t) {
			}
		})
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return t.crdGone
}

// watchHandler queues the pool of every ResourcePool the informer sees
// change, so that one changed or deleted by someone else is put back. The
// publisher's own writes come back too; their sync finds nothing to do.
func (p *Publisher) watchHandler(t *term) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if rp, ok := obj.(*v1alpha1.ResourcePool); ok {
				t.queue.Add(poolOf(rp))
			}
		},
		UpdateFunc: func(oldObj, newObj interface{}) {
			if rp, ok := oldObj.(*v1alpha1.ResourcePool); ok {
				t.queue.Add(poolOf(rp))
			}
			if rp, ok := newObj.(*v1alpha1.ResourcePool); ok {
				t.queue.Add(poolOf(rp))
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			rp, ok := obj.(*v1alpha1.ResourcePool)
			if !ok {
				return
			}
			id := poolOf(rp)
			p.mu.Lock()
			t.deleted.Insert(rp.UID)
			if w := t.written[id]; w != nil && w.UID == rp.UID {
				delete(t.written, id)
			}
			p.mu.Unlock()
			t.queue.Add(id)
		},
	}
}

func (p *Publisher) processNext(ctx context.Context, t *term) bool {
	id, shutdown := t.queue.Get()
	if shutdown {
		return false
	}
	defer t.queue.Done(id)

	if wait := p.untilAllowed(t, id); wait > 0 {
		t.queue.AddAfter(id, wait)
		return true
	}
	start := p.clock.Now()
	since, pending := p.takeUnpublished(t, id)
	syncCtx := ctx
	if pending && p.budget != nil && p.opts.MaxDelay > 0 {
		tn, wait := p.turnFor(t, id, since)
		if wait > 0 {
			// The pool waits in the queue, not in a worker.
			p.putBackUnpublished(t, id, since, pending)
			t.queue.AddAfter(id, wait)
			return true
		}
		syncCtx = withTurn(ctx, tn)
	}
	done, err := p.sync(syncCtx, t, id)
	if p.opts.Observe != nil {
		p.opts.Observe(p.clock.Since(start), err)
	}
	switch {
	case err != nil, done == later:
		p.putBackUnpublished(t, id, since, pending)
	case done == written && pending:
		delay := p.clock.Since(since)
		klog.FromContext(ctx).V(4).Info("Published pool status", "driver", id.Driver, "pool", id.Pool, "delay", delay)
		if p.opts.ObservePublished != nil {
			p.opts.ObservePublished(delay)
		}
	}
	if v1alpha1.IsNotServed(err) {
		// Every write would fail the same way until the CRD is back.
		p.mu.Lock()
		t.crdGone = true
		p.mu.Unlock()
		t.stop()
		return false
	}
	if err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Publishing ResourcePool; will retry with backoff", "driver", id.Driver, "pool", id.Pool)
		}
		t.queue.AddRateLimited(id)
		return true
	}
	t.queue.Forget(id)
	return true
}

// turnFor is a pool's turn to write a change unwritten since since: a
// token it holds and that has come, or what the budget admits (see admit);
// or how long to wait.
func (p *Publisher) turnFor(t *term, id drausage.PoolID, since time.Time) (turn, time.Duration) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if at, held := t.tokenAt[id]; held {
		if now.Before(at) {
			return 0, at.Sub(now)
		}
		delete(t.tokenAt, id)
		return withinBudget, 0
	}
	tn, wait := p.budget.admit(now, since.Add(p.opts.MaxDelay/2))
	if tn == withinBudget && wait > 0 {
		t.tokenAt[id] = now.Add(wait)
		return 0, wait
	}
	return tn, wait
}

// takeUnpublished hands a sync the time of the pool's oldest unwritten
// change, if any; the pool's later changes start a clock of their own.
func (p *Publisher) takeUnpublished(t *term, id drausage.PoolID) (since time.Time, pending bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	since, pending = t.unpublishedSince[id]
	delete(t.unpublishedSince, id)
	return since, pending
}

// putBackUnpublished returns what takeUnpublished handed out to a sync that
// did not publish it.
func (p *Publisher) putBackUnpublished(t *term, id drausage.PoolID, since time.Time, pending bool) {
	if !pending {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.noteUnwritten(id, since)
}

// noteUnwritten records that a pool has a change from at not yet written,
// keeping the oldest. The caller holds the publisher's lock.
func (t *term) noteUnwritten(id drausage.PoolID, at time.Time) {
	if oldest, ok := t.unpublishedSince[id]; !ok || at.Before(oldest) {
		t.unpublishedSince[id] = at
	}
}

// untilAllowed says how long a pool must wait for its next write.
func (p *Publisher) untilAllowed(t *term, id drausage.PoolID) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := t.lastWrite[id]
	if !ok {
		return 0
	}
	return p.opts.MinInterval - p.clock.Since(last)
}

// current returns a pool's object as the server last showed it: the
// informer's, or the publisher's own last write while the informer lags
// behind it. Further objects that name the same pool (made by hand) are
// returned as extra, oldest first kept.
func (p *Publisher) current(t *term, id drausage.PoolID) (obj *v1alpha1.ResourcePool, extra []*v1alpha1.ResourcePool) {
	indexed, _ := t.objects.ByIndex(byPool, id.String())
	var found []*v1alpha1.ResourcePool
	for _, o := range indexed {
		if rp, ok := o.(*v1alpha1.ResourcePool); ok && poolOf(rp) == id {
			found = append(found, rp)
		}
	}
	slices.SortFunc(found, func(a, b *v1alpha1.ResourcePool) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	p.mu.Lock()
	written := t.written[id]
	if written != nil && t.deleted.Has(written.UID) {
		delete(t.written, id)
		written = nil
	}
	p.mu.Unlock()
	if written != nil {
		if i := slices.IndexFunc(found, func(rp *v1alpha1.ResourcePool) bool { return rp.UID == written.UID }); i >= 0 {
			if !poolcache.Newer(written, found[i]) {
				// The informer has caught up with the write.
				p.mu.Lock()
				if t.written[id] == written {
					delete(t.written, id)
				}
				p.mu.Unlock()
				written = found[i]
			}
			found = slices.Delete(found, i, i+1)
		}
		return written, found
	}
	if len(found) == 0 {
		return nil, nil
	}
	return found[0], found[1:]
}

// outcome is what a sync did for the changes it took up.
type outcome int

const (
	// current: the object already showed them, or the pool is gone.
	current outcome = iota
	// written: a write made the object show them.
	written
	// later: they are still to be written.
	later
)

// sync makes one pool's object match its snapshot: create, update the
// status, or delete it when the pool is gone.
func (p *Publisher) sync(ctx context.Context, t *term, id drausage.PoolID) (outcome, error) {
	snap := p.source.Get(id)
	existing, extra := p.current(t, id)
	for _, dup := range extra {
		if err := p.delete(ctx, t, id, dup, "a second ResourcePool for the same pool"); err != nil {
			return later, err
		}
	}

	if snap == nil {
		switch {
		case existing == nil:
			return current, nil
		case !p.opts.Synced():
			return later, nil
		case p.source.HasPool(id):
			// Slices seen, snapshot not computed yet (as after a start):
			// the pool is not gone. Look again once the cache has it.
			t.queue.AddAfter(id, time.Second)
			return later, nil
		}
		return current, p.delete(ctx, t, id, existing, "its pool is gone")
	}
	var previous *v1alpha1.ResourcePoolStatus
	if existing != nil {
		previous = &existing.Status
	}
	status := poolstatus.For(&snap.PoolUsage, p.opts.DeviceHealthPolicy, previous, p.clock.Now())
	if existing == nil {
		return written, p.create(ctx, t, id, snap, status)
	}
	if existing.Spec.NodeName != snap.NodeName {
		// The spec is immutable; a pool that moved node gets a new object.
		if err := p.delete(ctx, t, id, existing, "its pool moved to another node"); err != nil {
			return later, err
		}
		return written, p.create(ctx, t, id, snap, status)
	}
	if poolstatus.Equal(&existing.Status, status) {
		return current, nil
	}
	updated := existing.DeepCopy()
	updated.Status = *status
	return written, p.updateStatus(ctx, t, id, updated)
}

// delete removes one object of a pool, if it is still the one the
// publisher saw.
func (p *Publisher) delete(ctx context.Context, t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool, why string) error {
	err := p.writes.Delete(ctx, obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &obj.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting ResourcePool %s: %w", obj.Name, err)
	}
	if err == nil {
		p.wrote("delete")
		klog.FromContext(ctx).V(2).Info("Deleted ResourcePool", "resourcepool", obj.Name, "driver", id.Driver, "pool", id.Pool, "reason", why)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := t.written[id]; w != nil && w.UID == obj.UID {
		delete(t.written, id)
		delete(t.lastWrite, id)
	}
	return nil
}

func (p *Publisher) create(ctx context.Context, t *term, id drausage.PoolID, snap *poolcache.Snapshot, status *v1alpha1.ResourcePoolStatus) error {
	obj := &v1alpha1.ResourcePool{
		ObjectMeta: metav1.ObjectMeta{Name: p.nameFor(t, id)},
		Spec:       v1alpha1.ResourcePoolSpec{Driver: id.Driver, PoolName: id.Pool, NodeName: snap.NodeName},
	}
	created, err := p.writes.Create(ctx, obj, metav1.CreateOptions{})
	if err == nil {
		p.wrote("create")
	}
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier leader after the informer listed: adopt it.
		created, err = p.client.DrascopeV1alpha1().ResourcePools().Get(ctx, obj.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating ResourcePool %s: %w", obj.Name, err)
	}
	if poolOf(created) != id {
		// Another pool holds the name; once the informer shows it,
		// nameFor picks another.
		return fmt.Errorf("ResourcePool %s belongs to pool %s/%s", created.Name, created.Spec.Driver, created.Spec.PoolName)
	}
	klog.FromContext(ctx).V(2).Info("Created ResourcePool", "resourcepool", created.Name, "driver", id.Driver, "pool", id.Pool)
	created.Status = *status
	return p.updateStatus(ctx, t, id, created)
}

func (p *Publisher) updateStatus(ctx context.Context, t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool) error {
	updated, err := p.writes.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Someone else changed or removed it: the informer brings the
			// server state, and the retry starts from it.
			p.mu.Lock()
			if w := t.written[id]; w != nil && w.UID == obj.UID {
				delete(t.written, id)
			}
			p.mu.Unlock()
		}
		return fmt.Errorf("updating status of ResourcePool %s: %w", obj.Name, err)
	}
	p.wrote("update")
	p.mu.Lock()
	defer p.mu.Unlock()
	if !t.deleted.Has(updated.UID) {
		t.written[id] = updated
	}
	t.lastWrite[id] = p.clock.Now()
	return nil
}

func (p *Publisher) wrote(verb string) {
	if p.opts.ObserveWrite != nil {
		p.opts.ObserveWrite(verb)
	}
}

// nameFor picks the object name of a new pool: its plain name when valid and
// not held by another pool's object, otherwise its hashed name.
func (p *Publisher) nameFor(t *term, id drausage.PoolID) string {
	plain, ok := v1alpha1.PlainName(id.Driver, id.Pool)
	if !ok {
		return v1alpha1.HashedName(id.Driver, id.Pool)
	}
	if obj, exists, _ := t.objects.GetByKey(plain); exists {
		if rp, ok := obj.(*v1alpha1.ResourcePool); ok && poolOf(rp) != id {
			return v1alpha1.HashedName(id.Driver, id.Pool)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for other, w := range t.written {
		if w.Name == plain && other != id {
			return v1alpha1.HashedName(id.Driver, id.Pool)
		}
	}
	return plain
}
