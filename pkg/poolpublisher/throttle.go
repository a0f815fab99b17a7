package poolpublisher

import (
	"context"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/resourcepool/v1alpha1"
)

// throttledWrites makes every ResourcePool write wait for a token of the
// write budget, so that the publisher's load on the apiserver stays small
// while pools are fresh; a write made for a change that is due (withDue)
// waits for a token only until then. So a quiet cluster's pools are written
// at once, a busy one's pools wait and are coalesced, and no pool waits
// past its due time however many are busy: the rate follows the number of
// busy pools per due interval rather than a fixed figure. Reads are not
// throttled: they only follow a failed write.
type throttledWrites struct {
	typedv1alpha1.ResourcePoolInterface
	limiter *rate.Limiter
	// overBudget, when set, is told of each write that went ahead of the
	// budget because it was due.
	overBudget func()
}

func newThrottledWrites(client typedv1alpha1.ResourcePoolInterface, perSecond int32, overBudget func()) *throttledWrites {
	return &throttledWrites{
		ResourcePoolInterface: client,
		limiter:               rate.NewLimiter(rate.Limit(perSecond), int(perSecond)),
		overBudget:            overBudget,
	}
}

type dueKey struct{}

// withDue returns a context whose writes stop waiting for the budget at due.
func withDue(ctx context.Context, due time.Time) context.Context {
	return context.WithValue(ctx, dueKey{}, due)
}

// wait returns when the write may go: a token came, or the write fell due
// first (it then takes no token, so that the budget stays for fresh pools).
func (t *throttledWrites) wait(ctx context.Context) error {
	due, ok := ctx.Value(dueKey{}).(time.Time)
	if !ok {
		return t.limiter.Wait(ctx)
	}
	now := time.Now()
	reservation := t.limiter.ReserveN(now, 1)
	delay := reservation.DelayFrom(now)
	untilDue := due.Sub(now)
	if reservation.OK() && delay <= untilDue {
		err := sleep(ctx, delay)
		if err != nil {
			reservation.Cancel()
		}
		return err
	}
	reservation.CancelAt(now)
	if err := sleep(ctx, untilDue); err != nil {
		return err
	}
	if t.overBudget != nil {
		t.overBudget()
	}
	return nil
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func (t *throttledWrites) Create(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.CreateOptions) (*v1alpha1.ResourcePool, error) {
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	return t.ResourcePoolInterface.Create(ctx, pool, opts)
}

func (t *throttledWrites) UpdateStatus(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.UpdateOptions) (*v1alpha1.ResourcePool, error) {
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	return t.ResourcePoolInterface.UpdateStatus(ctx, pool, opts)
}

func (t *throttledWrites) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if err := t.wait(ctx); err != nil {
		return err
	}
	return t.ResourcePoolInterface.Delete(ctx, name, opts)
}
