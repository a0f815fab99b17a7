// Package conflictcheck confirms the allocation conflicts that drascope's
// side cache suspects before anything reports them. The cache counts the
// scheduler's in-flight allocations and its informers' view, either of which
// can show two claims on one device for a moment that never existed in the
// API. A conflict counts once the claims involved, read from the apiserver
// (quorum reads), over-use the device or counter, and a second read finds
// each of them unchanged: the reads happen one after another, and unchanged
// claims held their allocations together at the end of the first round.
package conflictcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
)

// Results of a check, for Options.Observe.
const (
	Confirmed    = "Confirmed"
	NotConfirmed = "NotConfirmed"
)

// Options tune a Checker.
type Options struct {
	// Report, when set, is told of the conflicts of a pool that one check
	// confirmed, each once while it lasts.
	Report func(ctx context.Context, pool drausage.PoolID, conflicts []drausage.Conflict)
	// Observe, when set, counts checked conflicts by result.
	Observe func(result string, n int)
	// RetryDelay and MaxRetryDelay bound the backoff between checks of a
	// conflict that is still suspected but not confirmed.
	RetryDelay, MaxRetryDelay time.Duration
}

// GetClaim reads a claim from the apiserver; NotFound when it is gone.
type GetClaim func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// FromAPI reads claims with a quorum GET.
func FromAPI(client kubernetes.Interface) GetClaim {
	return func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
		return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

// Checker reads again the claims of every suspected, unconfirmed conflict
// and confirms the real ones to the cache.
type Checker struct {
	cache    *poolcache.Cache
	getClaim GetClaim
	opts     Options
	queue    workqueue.TypedRateLimitingInterface[drausage.PoolID]

	mu sync.Mutex
	// reported: keys of each pool's conflicts already reported, kept while
	// the conflict stays suspected.
	reported map[drausage.PoolID]sets.Set[string]
	// queued: what each pool's unconfirmed conflicts were when last
	// queued; a pool is checked at once only when that changes, and
	// otherwise with backoff.
	queued map[drausage.PoolID]string
}

// errUnconfirmed asks for the pool to be checked again later.
var errUnconfirmed = errors.New("suspected conflicts not confirmed")

// New returns a checker for the cache's conflicts; Run starts it.
func New(cache *poolcache.Cache, getClaim GetClaim, opts Options) *Checker {
	if opts.RetryDelay == 0 {
		opts.RetryDelay = 500 * time.Millisecond
	}
	if opts.MaxRetryDelay == 0 {
		opts.MaxRetryDelay = 30 * time.Second
	}
	return &Checker{
		cache:    cache,
		getClaim: getClaim,
		opts:     opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[drausage.PoolID](opts.RetryDelay, opts.MaxRetryDelay),
			workqueue.TypedRateLimitingQueueConfig[drausage.PoolID]{Name: "drascope_conflict_check"}),
		reported: map[drausage.PoolID]sets.Set[string]{},
		queued:   map[drausage.PoolID]string{},
	}
}

// Run checks pools until ctx ends. It subscribes to the cache; pools
// suspected before it started are checked too.
func (c *Checker) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	c.cache.Subscribe(c.changed)
	var all []drausage.PoolID
	for _, snap := range c.cache.List() {
		all = append(all, snap.PoolID)
	}
	c.changed(all)
	for {
		id, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		err := c.check(ctx, id)
		switch {
		case err == nil:
			c.queue.Forget(id)
		case errors.Is(err, errUnconfirmed):
			c.queue.AddRateLimited(id)
		default:
			logger.Error(err, "Checking suspected allocation conflicts; will retry", "pool", id)
			c.queue.AddRateLimited(id)
		}
		c.queue.Done(id)
	}
}

// changed queues pools whose unconfirmed conflicts are new, and forgets
// what was reported of conflicts that are gone.
func (c *Checker) changed(ids []drausage.PoolID) {
	for _, id := range ids {
		snap := c.cache.Get(id)
		var unconfirmed []drausage.Conflict
		if snap != nil {
			unconfirmed = snap.Unconfirmed()
		}
		signature := signatureOf(unconfirmed)
		c.mu.Lock()
		if snap == nil || len(snap.Suspected) == 0 {
			delete(c.reported, id)
		} else if reported := c.reported[id]; reported != nil {
			c.reported[id] = reported.Intersection(drausage.ConflictKeys(snap.Suspected))
		}
		fresh := signature != "" && signature != c.queued[id]
		if signature == "" {
			delete(c.queued, id)
		} else {
			c.queued[id] = signature
		}
		c.mu.Unlock()
		if fresh {
			c.queue.Add(id)
		}
	}
}

// signatureOf names a set of conflicts with the claims they involve.
func signatureOf(conflicts []drausage.Conflict) string {
	var b strings.Builder
	for _, conflict := range conflicts {
		b.WriteString(conflict.Key())
		for _, ref := range conflict.Claims {
			b.WriteString(" " + string(ref.UID))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// check confirms what it can of a pool's unconfirmed conflicts; it returns
// errUnconfirmed when some stay suspected.
func (c *Checker) check(ctx context.Context, id drausage.PoolID) error {
	snap := c.cache.Get(id)
	if snap == nil {
		return nil
	}
	unconfirmed := snap.Unconfirmed()
	if len(unconfirmed) == 0 {
		return nil
	}
	claims, err := c.readClaims(ctx, unconfirmed)
	if err != nil {
		return err
	}
	// The claims involved are enough: others can only add to an over-use.
	wanted := drausage.ConflictKeys(unconfirmed)
	var real []drausage.Conflict
	for _, conflict := range drausage.ComputePool(id, c.cache.Slices(id), claims, drausage.Options{}).Conflicts {
		if wanted.Has(conflict.Key()) {
			real = append(real, conflict)
		}
	}
	if len(real) > 0 {
		again, err := c.readClaims(ctx, real)
		if err != nil {
			return err
		}
		if !unchanged(claims, again) {
			// A claim changed between the reads: they may not have held
			// their devices at one moment. Look again later.
			real = nil
		}
	}
	if c.opts.Observe != nil {
		c.opts.Observe(Confirmed, len(real))
		c.opts.Observe(NotConfirmed, len(unconfirmed)-len(real))
	}
	if len(real) > 0 {
		c.cache.Confirm(id, real...)
		c.report(ctx, id, real)
	}
	if len(real) < len(unconfirmed) {
		klog.FromContext(ctx).V(4).Info("Suspected allocation conflicts not confirmed by the API; checking again later",
			"pool", id, "unconfirmed", len(unconfirmed)-len(real))
		return errUnconfirmed
	}
	return nil
}

// unchanged reports whether every claim of again was read the first time
// at the same resourceVersion.
func unchanged(first, again []*resourceapi.ResourceClaim) bool {
	versions := map[types.UID]string{}
	for _, claim := range first {
		versions[claim.UID] = claim.ResourceVersion
	}
	for _, claim := range again {
		if v, ok := versions[claim.UID]; !ok || v != claim.ResourceVersion {
			return false
		}
	}
	return true
}

// readClaims reads every claim the conflicts involve from the apiserver;
// claims deleted or replaced since are left out.
func (c *Checker) readClaims(ctx context.Context, conflicts []drausage.Conflict) ([]*resourceapi.ResourceClaim, error) {
	seen := sets.New[types.UID]()
	var claims []*resourceapi.ResourceClaim
	for _, conflict := range conflicts {
		for _, ref := range conflict.Claims {
			if seen.Has(ref.UID) {
				continue
			}
			seen.Insert(ref.UID)
			claim, err := c.getClaim(ctx, ref.Namespace, ref.Name)
			switch {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return nil, fmt.Errorf("reading claim %s: %w", ref, err)
			case claim.UID != ref.UID:
				continue
			}
			claims = append(claims, claim)
		}
	}
	return claims, nil
}

// report reports each conflict not reported yet while it lasts, and only
// while the cache still suspects it: a record of one that ended meanwhile
// would silence its next occurrence.
func (c *Checker) report(ctx context.Context, id drausage.PoolID, conflicts []drausage.Conflict) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	var suspected sets.Set[string]
	if snap := c.cache.Get(id); snap != nil {
		suspected = drausage.ConflictKeys(snap.Suspected)
	}
	if c.reported[id] == nil {
		c.reported[id] = sets.New[string]()
	}
	var fresh []drausage.Conflict
	for _, conflict := range conflicts {
		if suspected.Has(conflict.Key()) && !c.reported[id].Has(conflict.Key()) {
			c.reported[id].Insert(conflict.Key())
			fresh = append(fresh, conflict)
		}
	}
	c.mu.Unlock()
	for _, conflict := range fresh {
		logger.Info("Allocation conflict confirmed by the API", "pool", id, "kind", conflict.Kind, "conflict", conflict.Message, "claims", len(conflict.Claims))
	}
	if len(fresh) > 0 && c.opts.Report != nil {
		c.opts.Report(ctx, id, fresh)
	}
}
