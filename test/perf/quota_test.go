package perf

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// checkDeviceQuotas fails a DRAScope run whose DeviceQuotas' status does
// not come to count the devices their namespace's claims hold: then the
// scheduler did not enforce them, and the run measured nothing of quotas.
func checkDeviceQuotas(tCtx ktesting.TContext) error {
	client, err := versioned.NewForConfig(tCtx.RESTConfig())
	if err != nil {
		return err
	}
	quotas, err := client.DrascopeV1alpha1().DeviceQuotas(metav1.NamespaceAll).List(tCtx, metav1.ListOptions{})
	if err != nil || len(quotas.Items) == 0 {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(tCtx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, quota := range quotas.Items {
			claims, err := tCtx.Client().ResourceV1().ResourceClaims(quota.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			held := int64(0)
			for _, claim := range claims.Items {
				if claim.Status.Allocation != nil {
					held += int64(len(claim.Status.Allocation.Devices.Results))
				}
			}
			got, err := client.DrascopeV1alpha1().DeviceQuotas(quota.Namespace).Get(ctx, quota.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			used := int64(-1)
			if len(got.Status.Classes) > 0 {
				used = ptr.Deref(got.Status.Classes[0].Used.Devices, -1)
			}
			if used != held {
				last = fmt.Sprintf("DeviceQuota %s/%s: status counts %d devices used, the namespace's claims hold %d", quota.Namespace, quota.Name, used, held)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != "" {
		return fmt.Errorf("%s: %w", last, err)
	}
	return err
}
