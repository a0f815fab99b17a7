package poolpublisher

// The workers: each takes a pool from the term's queue, asks the plan
// whether to write now, and makes the pool's object match its snapshot.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolstatus"
)

func (p *Publisher) processNext(ctx context.Context, t *term) bool {
	id, shutdown := t.queue.Get()
	if shutdown {
		return false
	}
	defer t.queue.Done(id)
	if id == settleCheck {
		p.wakeSettled(t)
		return true
	}

	existing, _ := p.current(t, id)
	obj := hasObject
	if existing == nil {
		obj = toCreate
		if p.source.Get(id) == nil {
			obj = nothingToWrite
		}
	}
	start := p.clock.Now()
	p.mu.Lock()
	d := t.plan.decide(id, start, obj)
	settleIn, settling := t.plan.settleCheckIn(start)
	p.mu.Unlock()
	if d.handedTo != (drausage.PoolID{}) {
		// The queue keeps the earlier of its times.
		t.queue.AddAfter(d.handedTo, d.handedIn)
	}
	if d.wait > 0 {
		// The pool waits in the queue, not in a worker.
		t.queue.AddAfter(id, d.wait)
		if settling {
			// The queue keeps the earliest of the checks asked for.
			t.queue.AddAfter(settleCheck, settleIn)
		}
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
	if v1alpha1.IsNotServed(err) && !p.crdServed(ctx) {
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

// settleCheck is the queue's key for the check that every pool has
// settled; no pool has an empty driver name.
var settleCheck = drausage.PoolID{}

// wakeSettled queues the pools that wait for every pool to settle, once it
// has; until then it checks again when it may have.
func (p *Publisher) wakeSettled(t *term) {
	p.mu.Lock()
	ids, wait := t.plan.wakeSettled(p.clock.Now())
	p.mu.Unlock()
	if wait > 0 {
		t.queue.AddAfter(settleCheck, wait)
		return
	}
	for _, id := range ids {
		t.queue.Add(id)
	}
}

// crdServed says whether ResourcePools are served, after a write found
// something not found: the CRD, or only the object (deleted by hand),
// which the retry creates again. When in doubt, it says yes: the write is
// retried with backoff, and the term goes on.
func (p *Publisher) crdServed(ctx context.Context) bool {
	_, err := p.client.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{Limit: 1})
	return !v1alpha1.IsNotServed(err)
}

// current returns a pool's object as the server last showed it: the
// informer's, or the publisher's own last write while the informer lags
// behind it. Further objects that name the same pool (made by hand) are
// returned as extra, oldest first kept.
func (p *Publisher) current(t *term, id drausage.PoolID) (obj *v1alpha1.ResourcePool, extra []*v1alpha1.ResourcePool) {
	indexed, _ := t.objects.ByIndex(byPool, id.String())
	var found []*v1alpha1.ResourcePool
	p.mu.Lock()
	for _, o := range indexed {
		// An object this term deleted may linger in the informer a while.
		if rp, ok := o.(*v1alpha1.ResourcePool); ok && poolOf(rp) == id && !t.wasDeleted(rp.UID) {
			found = append(found, rp)
		}
	}
	p.mu.Unlock()
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
	return written, p.update(ctx, t, id, updated)
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
	if !apierrors.IsConflict(err) {
		// Gone: a second worker that took up the pool while the informer
		// still shows the object does not delete it again.
		t.noteDeleted(obj.UID, p.clock.Now())
	}
	if w := t.written[id]; w != nil && w.UID == obj.UID {
		delete(t.written, id)
		t.plan.forget(id)
	}
	return nil
}

// create makes a pool's object with its status in one request. Under a
// CRD from older manifests, with a status subresource, the apiserver drops
// the status on create and it follows in a second request (statusApart).
func (p *Publisher) create(ctx context.Context, t *term, id drausage.PoolID, snap *poolcache.Snapshot, status *v1alpha1.ResourcePoolStatus) error {
	obj := &v1alpha1.ResourcePool{
		ObjectMeta: metav1.ObjectMeta{Name: p.nameFor(t, id)},
		Spec:       v1alpha1.ResourcePoolSpec{Driver: id.Driver, PoolName: id.Pool, NodeName: snap.NodeName},
		Status:     *status,
	}
	created, err := p.writes.Create(ctx, obj, metav1.CreateOptions{})
	adopted := false
	if err == nil {
		p.wrote("create")
	}
	if apierrors.IsAlreadyExists(err) {
		// Made by an earlier leader after the informer listed: adopt it.
		created, err = p.client.DrascopeV1alpha1().ResourcePools().Get(ctx, obj.Name, metav1.GetOptions{})
		adopted = true
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
	if poolstatus.Equal(&created.Status, status) {
		return nil
	}
	if !adopted && apiequality.Semantic.DeepEqual(created.Status, v1alpha1.ResourcePoolStatus{}) {
		// The status was dropped: a status subresource, most likely.
		p.learnStatusSubresource(ctx, t)
	}
	created = created.DeepCopy()
	created.Status = *status
	return p.update(ctx, t, id, created)
}

// update writes an object's new status: with the object, or through the
// status subresource of a CRD that has one. A write that finds the CRD
// changed since the term began (an update that changed nothing, a status
// subresource not found) asks discovery again, and is made the other way.
func (p *Publisher) update(ctx context.Context, t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool) error {
	p.mu.Lock()
	apart := t.statusApart
	p.mu.Unlock()
	if apart {
		err := p.updateStatus(ctx, t, id, obj)
		if apierrors.IsNotFound(err) && !p.learnStatusSubresource(ctx, t) {
			// The current CRD applied since. %v, not %w: this NotFound
			// does not mean the CRD or the object is gone; the retry
			// writes the whole object and finds out.
			return fmt.Errorf("%v; the CRD has no status subresource now: writing the whole object next", err)
		}
		return err
	}
	updated, err := p.replace(ctx, t, id, obj, "", p.writes.Update)
	if err != nil {
		return err
	}
	if updated.ResourceVersion != obj.ResourceVersion || poolstatus.Equal(&updated.Status, &obj.Status) {
		return nil
	}
	// Nothing was written: the server kept the old status.
	if p.learnStatusSubresource(ctx, t) {
		obj = obj.DeepCopy()
		obj.ResourceVersion = updated.ResourceVersion
		return p.update(ctx, t, id, obj)
	}
	return fmt.Errorf("updating ResourcePool %s: the apiserver kept its old status", obj.Name)
}

func (p *Publisher) updateStatus(ctx context.Context, t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool) error {
	_, err := p.replace(ctx, t, id, obj, "status of ", p.writes.UpdateStatus)
	return err
}

// replace writes an existing object with put (an update of the object or
// of its status; what names which in errors), and keeps what the server
// returned until the informer catches up.
func (p *Publisher) replace(ctx context.Context, t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool, what string,
	put func(context.Context, *v1alpha1.ResourcePool, metav1.UpdateOptions) (*v1alpha1.ResourcePool, error)) (*v1alpha1.ResourcePool, error) {
	updated, err := put(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		p.forgetWriteOnConflict(t, id, obj, err)
		return nil, fmt.Errorf("updating %sResourcePool %s: %w", what, obj.Name, err)
	}
	p.wrote("update")
	p.remember(t, id, updated)
	return updated, nil
}

// forgetWriteOnConflict drops the publisher's own last write of an object
// someone else changed or removed: the informer brings the server state,
// and the retry starts from it.
func (p *Publisher) forgetWriteOnConflict(t *term, id drausage.PoolID, obj *v1alpha1.ResourcePool, err error) {
	if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := t.written[id]; w != nil && w.UID == obj.UID {
		delete(t.written, id)
	}
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
