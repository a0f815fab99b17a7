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
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/informers/externalversions"
	"github.com/drascope/drascope/pkg/poolcache"
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
	// MaxCreationsPerSecond paces the creation of the objects of pools
	// that have none, from a budget of its own (a second's worth at
	// once), when MaxWritesPerSecond is positive (without it nothing is
	// paced); zero means MaxWritesPerSecond.
	MaxCreationsPerSecond int32
	// MaxDelay, when positive, is the delay from a change to its write that
	// the publisher aims to stay under: a pool whose oldest unwritten change
	// reaches its deadline (this delay, less what its write and the
	// writes queued ahead of it will take) is due,
	// and its writes do not wait for the budget.
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
	// ObserveWriteFloor, when set, is told each time the write floor rises:
	// the fewest writes that could have written within MaxDelay every
	// change seen after the term's first write of its pool
	// (plan.floorChange). The publisher's writes beside it show what
	// pacing costs beyond the delay's own need.
	ObserveWriteFloor func()
	// Informers, when set, makes the informer factory of a term, as
	// kube-controller-manager hands its controllers their informers; by
	// default one on the publisher's client. Unlike those, it must return
	// a new, unstarted factory on every call, which the term starts, adds
	// its index and handler to, and shuts down: a term ends when the CRD
	// goes away, and an informer cannot restart. A shared factory would
	// be shut down with the first term.
	Informers func() externalversions.SharedInformerFactory
	// Clock, for tests.
	Clock clock.WithTicker
}

// Publisher keeps ResourcePool objects in line with the cache.
type Publisher struct {
	source Source
	client versioned.Interface
	// writes are the client's ResourcePool writes, within the budget.
	writes typedv1alpha1.ResourcePoolInterface
	// budget and creations are the write budgets of quiet pools' changes
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
	if opts.Informers == nil {
		opts.Informers = func() externalversions.SharedInformerFactory {
			return externalversions.NewSharedInformerFactory(client, 0)
		}
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
		creations := opts.MaxCreationsPerSecond
		if creations <= 0 {
			creations = opts.MaxWritesPerSecond
		}
		p.creations = rate.NewLimiter(rate.Limit(creations), int(creations))
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
				if p.term.plan.floorChange(id, snap.ChangedAt) && p.opts.ObserveWriteFloor != nil {
					p.opts.ObserveWriteFloor()
				}
			}
			p.term.queue.Add(id)
		}
	})
	return p
}

// Run publishes until ctx ends. Call it only in the process that leads
// scheduling; it may be called again for a later term. Without the CRD
// installed it logs one warning, looks again every second, and never disturbs
// scheduling; a CRD deleted while publishing sends it back to that.
func (p *Publisher) Run(ctx context.Context) {
	for p.runTerm(ctx) && ctx.Err() == nil {
		klog.FromContext(ctx).Info("Warning: the ResourcePool CRD (resourcepools.drascope.dev) was deleted; not publishing pool status until it is installed again")
	}
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

// Sizes returns how many entries each of the current term's long-lived maps
// holds, by name, for the churn soak (draruntime.Runtime.StateSizes); none while not
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
