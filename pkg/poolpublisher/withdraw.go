package poolpublisher

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// Withdraw deletes every ResourcePool object, for the replica leading
// scheduling while publishing is off: objects an earlier configuration left
// would keep their last status, and kubectl dra would show it as current.
// It retries with backoff until every object is gone or ctx ends; without
// the CRD there is nothing to do.
func Withdraw(ctx context.Context, client versioned.Interface) {
	logger := klog.FromContext(ctx)
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		list, err := client.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{})
		switch {
		case v1alpha1.IsNotServed(err):
			return true, nil
		case err != nil:
			logger.Error(err, "Listing ResourcePools to delete them (poolStatus.publishResourcePools is false); will retry with backoff")
			return false, nil
		case len(list.Items) == 0:
			return true, nil
		}
		logger.Info("Deleting ResourcePool objects: poolStatus.publishResourcePools is false, and objects left behind would show a stale status", "count", len(list.Items))
		for _, rp := range list.Items {
			err := client.DrascopeV1alpha1().ResourcePools().Delete(ctx, rp.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rp.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				logger.Error(err, "Deleting ResourcePool; will retry with backoff", "resourcepool", rp.Name)
				return false, nil
			}
		}
		// Look again: a publisher of another configuration may have
		// written one meanwhile.
		return false, nil
	})
}
