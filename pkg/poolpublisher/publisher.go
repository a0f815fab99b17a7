// Package poolpublisher writes ResourcePool objects (drascope.dev/v1alpha1)
// from the pool side cache: one per pool, only from the replica that holds
// the publisher lease, only when the status changed, at most once per
// minimum interval per pool, with backoff on errors.
package poolpublisher

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolstatus"
)

func existingStatus(obj *v1alpha1.ResourcePool) *v1alpha1.ResourcePoolStatus {
	if obj == nil {
		return nil
	}
	return &obj.Status
}

// Source is what the publisher reads: the side cache.
type Source interface {
	Get(id drausage.PoolID) *poolcache.Snapshot
	List() []*poolcache.Snapshot
	Subscribe(poolcache.Listener)
}

// ConflictReporter is told when a device of a pool newly appears in an
// allocation conflict, so that it can record an event on the pool's slices.
type ConflictReporter func(ctx context.Context, pool drausage.PoolID, message string)

// Options configure a Publisher.
type Options struct {
	// MinInterval is the least time between two writes of one pool's object.
	MinInterval time.Duration
	// MaxWritesPerSecond, when positive, bounds the writes across all pools.
	MaxWritesPerSecond int32
	// Synced reports whether the source has seen every existing slice and
	// claim; orphaned objects are deleted only after that.
	Synced func() bool
	// ReportConflict, when set, is called for new allocation conflicts.
	ReportConflict ConflictReporter
	// Observe, when set, receives each sync's duration and error.
	Observe func(duration time.Duration, err error)
	// ObservePublished, when set, receives the delay from the oldest change
	// a successful write reflects to that write.
	ObservePublished func(delay time.Duration)
	// ObserveWrite, when set, is told of every successful write to the API:
	// verb is create, update (of the status) or delete.
	ObserveWrite func(verb string)
	// Clock, for tests.
	Clock clock.WithTicker
}

// Publisher keeps ResourcePool objects in line with the cache.
type Publisher struct {
	source Source
	client dynamic.NamespaceableResourceInterface
	opts   Options
	clock  clock.WithTicker

	mu sync.Mutex
	// queue of pools to sync; nil while not publishing (no lease). Each term
	// of holding the lease has its own, because a queue cannot restart.
	queue workqueue.TypedRateLimitingInterface[drausage.PoolID]
	// objects: the last known server state of each pool's object.
	objects map[drausage.PoolID]*v1alpha1.ResourcePool
	// names in use, to keep two pools from sharing one.
	names map[string]drausage.PoolID
	// lastWrite per pool, for the minimum interval.
	lastWrite map[drausage.PoolID]time.Time
	// conflicts already reported, per pool.
	conflicts map[drausage.PoolID]sets.Set[string]
	// unpublishedSince: the oldest change of each pool not yet written.
	unpublishedSince map[drausage.PoolID]time.Time
}

// New returns a publisher; Run starts it.
func New(source Source, client dynamic.Interface, opts Options) *Publisher {
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	if opts.Synced == nil {
		opts.Synced = func() bool { return true }
	}
	p := &Publisher{
		source: source,
		client: client.Resource(v1alpha1.Resource),
		opts:   opts,
		clock:  c,
	}
	if opts.MaxWritesPerSecond > 0 {
		p.client = newThrottledWrites(p.client, opts.MaxWritesPerSecond)
	}
	p.resetLocked(nil)
	source.Subscribe(func(changed []drausage.PoolID) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.queue == nil {
			return
		}
		for _, id := range changed {
			if _, ok := p.unpublishedSince[id]; !ok {
				if snap := source.Get(id); snap != nil {
					p.unpublishedSince[id] = snap.ChangedAt
				}
			}
			p.queue.Add(id)
		}
	})
	return p
}

// resetLocked starts a term with a new queue (nil: not publishing) and
// forgets what an earlier term knew of the server, which may be stale.
func (p *Publisher) resetLocked(queue workqueue.TypedRateLimitingInterface[drausage.PoolID]) {
	p.queue = queue
	p.objects = map[drausage.PoolID]*v1alpha1.ResourcePool{}
	p.names = map[string]drausage.PoolID{}
	p.lastWrite = map[drausage.PoolID]time.Time{}
	p.conflicts = map[drausage.PoolID]sets.Set[string]{}
	p.unpublishedSince = map[drausage.PoolID]time.Time{}
}

// crdCheckInterval is how often a publisher without the CRD looks again.
const crdCheckInterval = 30 * time.Second

// Run publishes until ctx ends. Call it only while holding the publisher
// lease; it may be called again for a later term. Without the CRD installed
// it logs one warning, looks again every 30s, and never disturbs scheduling.
func (p *Publisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[drausage.PoolID](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[drausage.PoolID]{Name: "drascope_resourcepool_publisher", Clock: p.clock},
	)
	p.mu.Lock()
	p.resetLocked(queue)
	p.mu.Unlock()
	defer func() {
		queue.ShutDown()
		p.mu.Lock()
		p.resetLocked(nil)
		p.mu.Unlock()
	}()

	warned := false
	err := wait.PollUntilContextCancel(ctx, crdCheckInterval, true, func(ctx context.Context) (bool, error) {
		err := p.adoptExisting(ctx)
		switch {
		case err == nil:
			return true, nil
		case isCRDMissing(err):
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
		return
	}
	logger.Info("Publishing pool status as ResourcePool objects", "minInterval", p.opts.MinInterval)

	// Orphans: objects for pools that no longer exist. Only once the cache
	// has seen every slice, or every pool would look gone.
	go func() {
		if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) { return p.opts.Synced(), nil }); err != nil {
			return
		}
		p.mu.Lock()
		for id := range p.objects {
			queue.Add(id)
		}
		p.mu.Unlock()
		for _, snap := range p.source.List() {
			queue.Add(snap.PoolID)
		}
	}()

	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for p.processNext(ctx, queue) {
	}
}

// adoptExisting lists the objects already there, so that restarts keep their
// names and find orphans.
func (p *Publisher) adoptExisting(ctx context.Context) error {
	list, err := p.client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range list.Items {
		obj, err := fromUnstructured(&list.Items[i])
		if err != nil {
			return err
		}
		id := drausage.PoolID{Driver: obj.Spec.Driver, Pool: obj.Spec.PoolName}
		p.objects[id] = obj
		p.names[obj.Name] = id
	}
	return nil
}

func (p *Publisher) processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[drausage.PoolID]) bool {
	id, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(id)

	if wait := p.untilAllowed(id); wait > 0 {
		queue.AddAfter(id, wait)
		return true
	}
	start := p.clock.Now()
	err := p.sync(ctx, id)
	if p.opts.Observe != nil {
		p.opts.Observe(p.clock.Since(start), err)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Publishing ResourcePool; will retry with backoff", "driver", id.Driver, "pool", id.Pool)
		queue.AddRateLimited(id)
		return true
	}
	queue.Forget(id)
	return true
}

// untilAllowed says how long a pool must wait for its next write.
func (p *Publisher) untilAllowed(id drausage.PoolID) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.lastWrite[id]
	if !ok {
		return 0
	}
	return p.opts.MinInterval - p.clock.Since(last)
}

// sync makes one pool's object match its snapshot: create, update the
// status, or delete it when the pool is gone.
func (p *Publisher) sync(ctx context.Context, id drausage.PoolID) error {
	snap := p.source.Get(id)
	p.mu.Lock()
	existing := p.objects[id]
	p.mu.Unlock()

	if snap == nil {
		if existing == nil || !p.opts.Synced() {
			return nil
		}
		err := p.client.Delete(ctx, existing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting ResourcePool %s: %w", existing.Name, err)
		}
		if err == nil {
			p.wrote("delete")
		}
		klog.FromContext(ctx).V(2).Info("Deleted ResourcePool of a pool that is gone", "resourcepool", existing.Name, "driver", id.Driver, "pool", id.Pool)
		p.forget(id, existing.Name)
		return nil
	}
	p.reportConflicts(ctx, snap)

	status := poolstatus.For(&snap.PoolUsage, existingStatus(existing), p.clock.Now())
	if existing == nil {
		return p.create(ctx, id, snap, status)
	}
	if existing.Spec.NodeName != snap.NodeName {
		// The spec is immutable; a pool that moved node gets a new object.
		err := p.client.Delete(ctx, existing.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing ResourcePool %s: %w", existing.Name, err)
		}
		if err == nil {
			p.wrote("delete")
		}
		p.forget(id, existing.Name)
		return p.create(ctx, id, snap, status)
	}
	if poolstatus.Equal(&existing.Status, status) {
		// The object already shows this snapshot: nothing is unpublished.
		p.mu.Lock()
		delete(p.unpublishedSince, id)
		p.mu.Unlock()
		return nil
	}
	updated := existing.DeepCopy()
	updated.Status = *status
	return p.updateStatus(ctx, id, updated)
}

func (p *Publisher) create(ctx context.Context, id drausage.PoolID, snap *poolcache.Snapshot, status *v1alpha1.ResourcePoolStatus) error {
	obj := &v1alpha1.ResourcePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ResourcePool"},
		ObjectMeta: metav1.ObjectMeta{Name: p.nameFor(id)},
		Spec:       v1alpha1.ResourcePoolSpec{Driver: id.Driver, PoolName: id.Pool, NodeName: snap.NodeName},
	}
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	created, err := p.client.Create(ctx, u, metav1.CreateOptions{})
	if err == nil {
		p.wrote("create")
	}
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier leader after this one listed: adopt it.
		created, err = p.client.Get(ctx, obj.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating ResourcePool %s: %w", obj.Name, err)
	}
	current, err := fromUnstructured(created)
	if err != nil {
		return err
	}
	if current.Spec.Driver != id.Driver || current.Spec.PoolName != id.Pool {
		// Another pool holds the name; nameFor picks another next time.
		p.mu.Lock()
		p.names[current.Name] = drausage.PoolID{Driver: current.Spec.Driver, Pool: current.Spec.PoolName}
		p.mu.Unlock()
		return fmt.Errorf("ResourcePool %s belongs to pool %s/%s", current.Name, current.Spec.Driver, current.Spec.PoolName)
	}
	klog.FromContext(ctx).V(2).Info("Created ResourcePool", "resourcepool", current.Name, "driver", id.Driver, "pool", id.Pool)
	current.Status = *status
	return p.updateStatus(ctx, id, current)
}

func (p *Publisher) updateStatus(ctx context.Context, id drausage.PoolID, obj *v1alpha1.ResourcePool) error {
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	updated, err := p.client.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone else changed or removed it: learn the server state, retry.
		p.refresh(ctx, id, obj.Name)
		return fmt.Errorf("updating status of ResourcePool %s: %w", obj.Name, err)
	}
	if err != nil {
		return fmt.Errorf("updating status of ResourcePool %s: %w", obj.Name, err)
	}
	p.wrote("update")
	current, err := fromUnstructured(updated)
	if err != nil {
		return err
	}
	now := p.clock.Now()
	p.mu.Lock()
	p.objects[id] = current
	p.names[current.Name] = id
	p.lastWrite[id] = now
	since, ok := p.unpublishedSince[id]
	delete(p.unpublishedSince, id)
	p.mu.Unlock()
	if ok {
		klog.FromContext(ctx).V(4).Info("Updated ResourcePool status", "resourcepool", current.Name, "delay", now.Sub(since))
		if p.opts.ObservePublished != nil {
			p.opts.ObservePublished(now.Sub(since))
		}
	}
	return nil
}

func (p *Publisher) wrote(verb string) {
	if p.opts.ObserveWrite != nil {
		p.opts.ObserveWrite(verb)
	}
}

// refresh re-reads one object after a conflict.
func (p *Publisher) refresh(ctx context.Context, id drausage.PoolID, name string) {
	u, err := p.client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			p.forget(id, name)
		}
		return
	}
	if obj, err := fromUnstructured(u); err == nil {
		p.mu.Lock()
		p.objects[id] = obj
		p.mu.Unlock()
	}
}

func (p *Publisher) forget(id drausage.PoolID, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.objects, id)
	delete(p.lastWrite, id)
	delete(p.conflicts, id)
	delete(p.unpublishedSince, id)
	if p.names[name] == id {
		delete(p.names, name)
	}
}

// nameFor picks the object name of a new pool: its plain name when valid and
// free, otherwise its hashed name.
func (p *Publisher) nameFor(id drausage.PoolID) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if plain, ok := v1alpha1.PlainName(id.Driver, id.Pool); ok {
		if owner, taken := p.names[plain]; !taken || owner == id {
			return plain
		}
	}
	return v1alpha1.HashedName(id.Driver, id.Pool)
}

// reportConflicts reports each device that newly entered an allocation
// conflict, once.
func (p *Publisher) reportConflicts(ctx context.Context, snap *poolcache.Snapshot) {
	current := sets.New[string]()
	for _, e := range snap.ValidationErrors {
		if e.Kind == drausage.AllocationConflict {
			current.Insert(e.Message)
		}
	}
	p.mu.Lock()
	reported := p.conflicts[snap.PoolID]
	p.conflicts[snap.PoolID] = current
	p.mu.Unlock()
	if p.opts.ReportConflict == nil {
		return
	}
	for _, msg := range sets.List(current.Difference(reported)) {
		p.opts.ReportConflict(ctx, snap.PoolID, msg)
	}
}

func toUnstructured(obj *v1alpha1.ResourcePool) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromUnstructured(u *unstructured.Unstructured) (*v1alpha1.ResourcePool, error) {
	obj := &v1alpha1.ResourcePool{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, fmt.Errorf("decoding ResourcePool %s: %w", u.GetName(), err)
	}
	return obj, nil
}

// isCRDMissing reports whether a List error says the resourcepools resource
// is not served: a collection that exists never answers NotFound.
func isCRDMissing(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}
