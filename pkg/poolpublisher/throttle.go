package poolpublisher

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/resourcepool/v1alpha1"
)

// throttledWrites makes every ResourcePool write wait for a token, so that
// the publisher's load on the apiserver is bounded however many pools
// change. Reads are not throttled: they only follow a failed write.
type throttledWrites struct {
	typedv1alpha1.ResourcePoolInterface
	limiter flowcontrol.RateLimiter
}

func newThrottledWrites(client typedv1alpha1.ResourcePoolInterface, perSecond int32) *throttledWrites {
	return &throttledWrites{
		ResourcePoolInterface: client,
		limiter:               flowcontrol.NewTokenBucketRateLimiter(float32(perSecond), int(perSecond)),
	}
}

func (t *throttledWrites) Create(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.CreateOptions) (*v1alpha1.ResourcePool, error) {
	if err := t.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	return t.ResourcePoolInterface.Create(ctx, pool, opts)
}

func (t *throttledWrites) UpdateStatus(ctx context.Context, pool *v1alpha1.ResourcePool, opts metav1.UpdateOptions) (*v1alpha1.ResourcePool, error) {
	if err := t.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	return t.ResourcePoolInterface.UpdateStatus(ctx, pool, opts)
}

func (t *throttledWrites) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if err := t.limiter.Wait(ctx); err != nil {
		return err
	}
	return t.ResourcePoolInterface.Delete(ctx, name, opts)
}
