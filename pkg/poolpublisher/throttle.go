package poolpublisher

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/flowcontrol"
)

// throttledWrites makes every ResourcePool write wait for a token, so that
// the publisher's load on the apiserver is bounded however many pools
// change. Reads are not throttled: they only follow a failed write.
type throttledWrites struct {
	dynamic.NamespaceableResourceInterface
	limiter flowcontrol.RateLimiter
}

func newThrottledWrites(client dynamic.NamespaceableResourceInterface, perSecond int32) *throttledWrites {
	return &throttledWrites{
		NamespaceableResourceInterface: client,
		limiter:                        flowcontrol.NewTokenBucketRateLimiter(float32(perSecond), int(perSecond)),
	}
}

func (t *throttledWrites) Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions, subresources ...string) (*unstructured.Unstructured, error) {
	if err := t.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	return t.NamespaceableResourceInterface.Create(ctx, obj, opts, subresources...)
}

func (t *throttledWrites) UpdateStatus(ctx context.Context, obj *unstructured.Unstructured, opts metav1.UpdateOptions) (*unstructured.Unstructured, error) {
	if err := t.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	return t.NamespaceableResourceInterface.UpdateStatus(ctx, obj, opts)
}

func (t *throttledWrites) Delete(ctx context.Context, name string, opts metav1.DeleteOptions, subresources ...string) error {
	if err := t.limiter.Wait(ctx); err != nil {
		return err
	}
	return t.NamespaceableResourceInterface.Delete(ctx, name, opts, subresources...)
}
