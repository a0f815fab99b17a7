package poolpublisher

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/drascope/v1alpha1"
)

// throttledWrites makes ResourcePool writes take a token of the write
// budget, so that the publisher's load on the apiserver stays small while
// pools are fresh. A sync for a pool's change gets its turn from the plan
// first, and its writes then go without waiting; any other write (a repair
// after a hand edit, an orphan's delete) waits for a token. Reads are not
// throttled: they only follow a failed write.
type throttledWrites struct {
	typedv1alpha1.ResourcePoolInterface
	limiter *rate.Limiter
	// overBudget, when set, is told of each successful write that went
	// ahead of the budget because its change was due.
	overBudget func()
}

func newThrottledWrites(client typedv1alpha1.ResourcePoolInterface, limiter *rate.Limiter, overBudget func()) *throttledWrites {
	return &throttledWrites{
		ResourcePoolInterface: client,
		limiter:               limiter,
		overBudget:            overBudget,
	}
}

// turn is how a sync's writes were admitted.
type turn int

const (
	// withinBudget: the sync took a token.
	withinBudget turn = iota + 1
	// pastBudget: the sync's change was due; its writes take no token, so
	// that the budget stays for fresh pools.
	pastBudget
)

type turnKey struct{}

// withTurn marks the writes made with ctx as admitted.
func withTurn(ctx context.Context, tn turn) context.Context {
	return context.WithValue(ctx, turnKey{}, tn)
}

// notYet is the error of a write no turn admitted while the budget has no
// token: the pool is to be synced again after delay. A worker never waits
// for the budget: a burst of deletes (nodes scaled down) would hold every
// worker while other pools' changes reach their deadlines.
type notYet struct{ delay time.Duration }

func (e *notYet) Error() string {
	return fmt.Sprintf("ResourcePool write budget (poolStatus.maxWritesPerSecond) spent: next token in %s", e.delay)
}

// wait says whether the write may go now: at once for an admitted sync,
// otherwise if a token of the budget is free (notYet when not).
func (t *throttledWrites) wait(ctx context.Context) error {
	switch ctx.Value(turnKey{}) {
	case withinBudget, pastBudget:
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := t.limiter.Reserve()
	if !r.OK() {
		return &notYet{delay: time.Second}
	}
	if delay := r.Delay(); delay > 0 {
		r.Cancel()
		return &notYet{delay: delay}
	}
	return nil
}

// done counts a write that went through past the budget.
func (t *throttledWrites) done(ctx context.Context, err error) {
	if err == nil && t.overBudget != nil && ctx.Value(turnKey{}) == pastBudget {
		t.overBudget()
	}
}

func (t *throttledWrites) Create(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.CreateOptions) (*v1alpha1.ResourcePool, error) {
	return throttled(ctx, t, func() (*v1alpha1.ResourcePool, error) { return t.ResourcePoolInterface.Create(ctx, pool, opts) })
}

func (t *throttledWrites) Update(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.UpdateOptions) (*v1alpha1.ResourcePool, error) {
	return throttled(ctx, t, func() (*v1alpha1.ResourcePool, error) { return t.ResourcePoolInterface.Update(ctx, pool, opts) })
}

func (t *throttledWrites) UpdateStatus(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.UpdateOptions) (*v1alpha1.ResourcePool, error) {
	return throttled(ctx, t, func() (*v1alpha1.ResourcePool, error) { return t.ResourcePoolInterface.UpdateStatus(ctx, pool, opts) })
}

// throttled makes one write once the budget allows it, and counts it.
func throttled(ctx context.Context, t *throttledWrites, write func() (*v1alpha1.ResourcePool, error)) (*v1alpha1.ResourcePool, error) {
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	written, err := write()
	t.done(ctx, err)
	return written, err
}

func (t *throttledWrites) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if err := t.wait(ctx); err != nil {
		return err
	}
	err := t.ResourcePoolInterface.Delete(ctx, name, opts)
	t.done(ctx, err)
	return err
}
