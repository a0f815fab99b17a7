// Package poolpublisher writes ResourcePool objects (drascope.dev/v1alpha1)
// from the pool side cache: one per pool, only from the replica that leads
// scheduling (the caller decides; see pkg/draruntime), only when the status
// changed, each change by its deadline (see plan), quiet pools early within
// a write budget, at most once per minimum interval per pool, with backoff
// on errors. While publishing it watches the objects it writes, so one
// deleted or edited by hand is put back as soon as the minimum interval
// allows.
package poolpublisher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/drascope/drascope/pkg/informerevents"
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
	// a successful write reflects to that write; first is set for a pool's
	// first publication (its object created), which is paced apart.
	ObservePublished func(delay time.Duration, first bool)
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
	// budget and creations are the write budget of quiet pools' changes
	// and of first publications; nil without MaxWritesPerSecond. Writes
	// that no turn admitted (repairs) wait for budget's tokens.
	budget, creations *rate.Limiter
	opts              Options
	clock             clock.WithTicker

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
	// deleted are the UIDs of objects the informer saw deleted, and when,
	// so that a write that returned after the delete is not trusted. A
	// write returns within seconds: entries go after deletedFor.
	deleted map[types.UID]time.Time
	// plan says when each pool is written. A sync takes up a pool's
	// unwritten change before it reads the snapshot, so a change during
	// the sync's writes gets a deadline of its own.
	plan *plan
	// crdGone is set when a write found the CRD no longer served: the term
	// ends, and Run goes back to waiting for it.
	crdGone bool
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
		p.budget = rate.NewLimiter(rate.Limit(opts.MaxWritesPerSecond), int(opts.MaxWritesPerSecond))
		p.creations = rate.NewLimiter(rate.Limit(opts.MaxWritesPerSecond), int(opts.MaxWritesPerSecond))
		p.writes = newThrottledWrites(p.writes, p.budget, opts.ObserveOverBudget)
	}
	source.Subscribe(func(changed []drausage.PoolID) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.term == nil {
			return
		}
		for _, id := range changed {
			if snap := source.Get(id); snap != nil {
				p.term.plan.changed(id, snap.ChangedAt, p.clock.Now())
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
		// KEP-5677's name: workqueue_depth{name="resourcepool"} and the
		// rest of client-go's workqueue metrics.
		workqueue.TypedRateLimitingQueueConfig[drausage.PoolID]{Name: "resourcepool", Clock: p.clock},
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
		queue:   queue,
		objects: informer.GetIndexer(),
		written: map[drausage.PoolID]*v1alpha1.ResourcePool{},
		deleted: map[types.UID]time.Time{},
		plan:    newPlan(p.opts.MinInterval, p.opts.MaxDelay, workers, p.budget, p.creations),
		stop:    cancel,
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
		t.plan.changed(snap.PoolID, snap.ChangedAt, snap.ComputedAt)
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
			t.plan.changed(snap.PoolID, snap.ChangedAt, snap.ComputedAt)
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

// deletedFor is how long the UID of a deleted object is remembered.
const deletedFor = time.Minute

// noteDeleted remembers a deleted object's UID, and forgets those older
// than deletedFor, so that pool churn does not grow the set. The caller
// holds the publisher's lock.
func (t *term) noteDeleted(uid types.UID, now time.Time) {
	for old, at := range t.deleted {
		if now.Sub(at) > deletedFor {
			delete(t.deleted, old)
		}
	}
	t.deleted[uid] = now
}

// wasDeleted reports whether the informer saw the object deleted. The
// caller holds the publisher's lock.
func (t *term) wasDeleted(uid types.UID) bool {
	_, gone := t.deleted[uid]
	return gone
}

// watchHandler queues the pool of every ResourcePool the informer sees
// change, so that one changed or deleted by someone else is put back. The
// publisher's own writes coming back queue nothing.
func (p *Publisher) watchHandler(t *term) cache.ResourceEventHandler {
	queue := func(obj interface{}) {
		if rp, ok := obj.(*v1alpha1.ResourcePool); ok && !p.ownWrite(t, rp) {
			t.queue.Add(poolOf(rp))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: queue,
		UpdateFunc: func(_, newObj interface{}) {
			// The pool an object names is immutable (spec), so the new
			// object names the old one's pool.
			queue(newObj)
		},
		DeleteFunc: func(obj interface{}) {
			rp, ok := informerevents.Object[*v1alpha1.ResourcePool](obj)
			if !ok {
				return
			}
			id := poolOf(rp)
			p.mu.Lock()
			t.noteDeleted(rp.UID, p.clock.Now())
			if w := t.written[id]; w != nil && w.UID == rp.UID {
				delete(t.written, id)
			}
			p.mu.Unlock()
			t.queue.Add(id)
		},
	}
}

// ownWrite reports whether the informer's rp is the publisher's own last
// write of its pool, or an earlier version of it: nothing to sync.
func (p *Publisher) ownWrite(t *term, rp *v1alpha1.ResourcePool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := t.written[poolOf(rp)]
	return w != nil && w.UID == rp.UID && !poolcache.Newer(rp, w)
}

func (p *Publisher) processNext(ctx context.Context, t *term) bool {
	id, shutdown := t.queue.Get()
	if shutdown {
		return false
	}
	defer t.queue.Done(id)

	existing, _ := p.current(t, id)
	start := p.clock.Now()
	p.mu.Lock()
	d := t.plan.decide(id, start, existing != nil)
	p.mu.Unlock()
	if d.wait > 0 {
		// The pool waits in the queue, not in a worker.
		t.queue.AddAfter(id, d.wait)
		return true
	}
	syncCtx := ctx
	if d.turn != 0 {
		syncCtx = withTurn(ctx, d.turn)
	}
	done, err := p.sync(syncCtx, t, id)
	end := p.clock.Now()
	var wait *notYet
	if errors.As(err, &wait) {
		// A repair or delete waits for the budget in the queue.
		p.mu.Lock()
		t.plan.putBack(id, d)
		p.mu.Unlock()
		t.queue.AddAfter(id, wait.delay)
		return true
	}
	if p.opts.Observe != nil {
		p.opts.Observe(end.Sub(start), err)
	}
	p.mu.Lock()
	switch {
	case err != nil, done == later:
		t.plan.putBack(id, d)
	case done == written:
		t.plan.wrote(id, start, end)
	default:
		t.plan.finished(id)
		if existing == nil && !p.source.HasPool(id) {
			// Gone, and no object: nothing to plan for it.
			t.plan.forget(id)
		}
	}
	p.mu.Unlock()
	if done == written && err == nil && d.pending {
		delay := end.Sub(d.since)
		klog.FromContext(ctx).V(4).Info("Published pool status", "driver", id.Driver, "pool", id.Pool, "delay", delay, "created", existing == nil)
		if p.opts.ObservePublished != nil {
			p.opts.ObservePublished(delay, existing == nil)
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

// OldestUnwritten returns how long the oldest change no write has taken up
// yet has waited, and whether this process publishes at all.
func (p *Publisher) OldestUnwritten() (age time.Duration, publishing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.term == nil {
		return 0, false
	}
	if oldest, ok := p.term.plan.oldestUnwritten(); ok {
		return max(p.clock.Since(oldest), 0), true
	}
	return 0, true
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
	if written != nil && t.wasDeleted(written.UID) {
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
		t.plan.forget(id)
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
	// Remembered, so that the informer's event for it queues nothing; a
	// failed status write below leaves it with an empty status, which the
	// retry sees.
	p.remember(t, id, created)
	created = created.DeepCopy()
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
	p.remember(t, id, updated)
	return nil
}

// remember keeps a pool's object as a write returned it, until the
// informer catches up.
func (p *Publisher) remember(t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !t.wasDeleted(obj.UID) {
		t.written[id] = obj
	}
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

// Sizes returns how many entries each of the current term's long-lived maps
// holds, by name, for the churn soak and the state gauge; none while not
// publishing.
func (p *Publisher) Sizes() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.term
	if t == nil {
		return nil
	}
	return map[string]int{
		"publisher_written": len(t.written),
		"publisher_deleted": len(t.deleted),
		"publisher_plan":    len(t.plan.pools),
	}
}
