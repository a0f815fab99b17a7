package poolpublisher

// A term is one spell of publishing: its queue, its informer of
// ResourcePools and what it learnt of the server, all made fresh, since a
// queue and an informer cannot restart and an earlier term's view may be
// stale.

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/informers/externalversions"
	"github.com/drascope/drascope/pkg/informerevents"
	"github.com/drascope/drascope/pkg/poolcache"
)

// term is one term of publishing.
type term struct {
	queue workqueue.TypedRateLimitingInterface[drausage.PoolID]
	// objects is the informer's index of ResourcePools by pool;
	// informerSynced says when it holds every object.
	objects        cache.Indexer
	informerSynced cache.InformerSynced
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
	// statusApart is set while the CRD has a status subresource (applied
	// from older manifests): each status takes a write of its own
	// (subresource.go). statusKnown: discovery has answered once.
	statusApart, statusKnown bool
	// crdGone is set when a write found the CRD no longer served: the term
	// ends, and Run goes back to waiting for it.
	crdGone bool
	// stop ends the term's workers.
	stop context.CancelFunc
}

// crdCheckInterval is how often a publisher without the CRD looks again:
// one cheap List (a 404 while the CRD is missing) a second, so that pools
// match the claims within the recovery target (5s, docs/reliability.md)
// of the CRD being installed again. A watch would need more RBAC
// (customresourcedefinitions) for no fewer seconds.
const crdCheckInterval = time.Second

// runTerm waits for the CRD and publishes until ctx ends or the CRD goes
// away; it reports the latter.
func (p *Publisher) runTerm(ctx context.Context) (crdGone bool) {
	if !p.waitForCRD(ctx) {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	t, factory, err := p.newTerm(cancel)
	defer func() {
		// End the informer before the queue.
		cancel()
		factory.Shutdown()
		t.queue.ShutDown()
	}()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Not publishing in this term")
		return false
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), t.informerSynced) {
		return false
	}
	p.learnStatusSubresource(ctx, t)
	p.mu.Lock()
	p.term = t
	// Pools the cache knew before the term began have waited since their
	// last change, and are due as any other: the informer's first events
	// queue them before the workers start. queueEverything, once the cache
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
	klog.FromContext(ctx).Info("Publishing pool status as ResourcePool objects", "minInterval", p.opts.MinInterval, "maxWritesPerSecond", p.opts.MaxWritesPerSecond, "maxCreationsPerSecond", p.opts.MaxCreationsPerSecond, "maxDelay", p.opts.MaxDelay)
	go p.queueEverything(ctx, t)
	go func() {
		<-ctx.Done()
		t.queue.ShutDown()
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

// waitForCRD lists ResourcePools every crdCheckInterval until the CRD is
// served, warning once while it is not; false when ctx ended first.
func (p *Publisher) waitForCRD(ctx context.Context) bool {
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
	return err == nil
}

// newTerm makes a term's queue and its informer of ResourcePools, from a
// factory of its own (Options.Informers), indexed by pool and feeding the
// queue; the caller starts the factory and shuts it and the queue down.
func (p *Publisher) newTerm(stop context.CancelFunc) (*term, externalversions.SharedInformerFactory, error) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[drausage.PoolID](200*time.Millisecond, 30*time.Second),
		// KEP-5677's name: workqueue_depth{name="resourcepool"} and the
		// rest of client-go's workqueue metrics.
		workqueue.TypedRateLimitingQueueConfig[drausage.PoolID]{Name: "resourcepool", Clock: p.clock},
	)
	factory := p.opts.Informers()
	informer := factory.Drascope().V1alpha1().ResourcePools().Informer()
	t := &term{
		queue:          queue,
		objects:        informer.GetIndexer(),
		informerSynced: informer.HasSynced,
		written:        map[drausage.PoolID]*v1alpha1.ResourcePool{},
		deleted:        map[types.UID]time.Time{},
		plan:           newPlan(p.opts.MinInterval, p.opts.MaxDelay, workers, p.budget, p.creations),
		stop:           stop,
	}
	if err := informer.AddIndexers(cache.Indexers{byPool: func(obj interface{}) ([]string, error) {
		if rp, ok := obj.(*v1alpha1.ResourcePool); ok {
			return []string{poolOf(rp).String()}, nil
		}
		return nil, nil
	}}); err != nil {
		return t, factory, fmt.Errorf("indexing ResourcePools: %w", err)
	}
	if _, err := informer.AddEventHandler(p.watchHandler(t)); err != nil {
		return t, factory, fmt.Errorf("watching ResourcePools: %w", err)
	}
	return t, factory, nil
}

// queueEverything queues every pool and every object once the side cache
// has seen every slice (before, every pool would look gone): objects of
// pools that no longer exist are orphans, and a pool that changed before
// the term began has waited since then, so it is due as any other (or a
// new leader, or a first start with many pools, would publish them at the
// budget's pace).
func (p *Publisher) queueEverything(ctx context.Context, t *term) {
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) { return p.opts.Synced(), nil }); err != nil {
		return
	}
	for _, obj := range t.objects.List() {
		if rp, ok := obj.(*v1alpha1.ResourcePool); ok {
			t.queue.Add(poolOf(rp))
		}
	}
	for _, snap := range p.source.List() {
		p.mu.Lock()
		t.plan.changed(snap.PoolID, snap.ChangedAt, snap.ComputedAt)
		p.mu.Unlock()
		t.queue.Add(snap.PoolID)
	}
}

// deletedFor is how long the UID of a deleted object is remembered.
const deletedFor = time.Minute

// noteDeleted remembers a deleted object's UID, and forgets those older
// than deletedFor, so that pool churn does not grow the set. The caller
// holds the publisher's lock.
func (t *term) noteDeleted(uid types.UID, now time.Time) {
	if uid == "" {
		// No object the server made: nothing to tell apart.
		return
	}
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
