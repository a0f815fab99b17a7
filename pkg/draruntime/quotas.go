package draruntime

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/devicequota"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/informers/externalversions"
	listers "github.com/drascope/drascope/pkg/generated/listers/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/informerevents"
)

// quotaSyncTimeout bounds how long the start waits for the DeviceQuotas
// to be listed.
const quotaSyncTimeout = 30 * time.Second

// deviceQuotas follows the DeviceQuotas the plugin enforces
// (pkg/devicequota, docs/quota.md), and the pods refused for one, which
// a change of their namespace's quotas retries.
type deviceQuotas struct {
	lister  listers.DeviceQuotaLister
	synced  func() bool
	waiting *waitingPods
}

// startQuotas watches DeviceQuotas where the apiserver serves them, and
// waits, for at most quotaSyncTimeout, until they are listed: a scheduler
// that starts placing pods before it knows the quotas could take a
// namespace over one. Where they are not served (the CRD is not
// installed), or cannot be listed in time (RBAC), nothing is enforced
// and one log line says why.
func (r *Runtime) startQuotas(ctx context.Context, h Handle, config *restclient.Config) error {
	logger := klog.FromContext(ctx)
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("DeviceQuota client: %w", err)
	}
	served, err := servesDeviceQuotas(ctx, client)
	if err != nil {
		logger.Info("Could not ask the apiserver whether it serves DeviceQuotas; watching them anyway", "err", err)
	} else if !served {
		logger.Info("Not enforcing DeviceQuotas: the apiserver does not serve " + v1alpha1.DeviceQuotas.GroupResource().String() + " (install manifests/crds/devicequotas.drascope.dev.yaml)")
		return nil
	}
	factory := externalversions.NewSharedInformerFactory(client, 0)
	informer := factory.Drascope().V1alpha1().DeviceQuotas()
	q := &deviceQuotas{lister: informer.Lister(), synced: informer.Informer().HasSynced, waiting: newWaitingPods(h, clock.RealClock{})}
	retry := func(obj interface{}) {
		if quota, ok := informerevents.Object[*v1alpha1.DeviceQuota](obj); ok {
			q.waiting.activateWhere(logger, "A DeviceQuota changed, retrying the pods of its namespace that it refused",
				func(pod *v1.Pod) bool { return pod.Namespace == quota.Namespace })
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    retry,
		UpdateFunc: func(_, obj interface{}) { retry(obj) },
		DeleteFunc: retry,
	}); err != nil {
		return fmt.Errorf("DeviceQuotas: %w", err)
	}
	// A claim deallocated or deleted frees its namespace's quota.
	freed := func(claim *resourceapi.ResourceClaim) {
		q.waiting.activateWhere(logger, "An allocation was released, retrying the pods of its namespace that a DeviceQuota refused",
			func(pod *v1.Pod) bool { return pod.Namespace == claim.Namespace })
	}
	if _, err := r.informers.Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj interface{}) {
			before, ok1 := old.(*resourceapi.ResourceClaim)
			after, ok2 := obj.(*resourceapi.ResourceClaim)
			if ok1 && ok2 && before.Status.Allocation != nil && after.Status.Allocation == nil {
				freed(after)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if claim, ok := informerevents.Object[*resourceapi.ResourceClaim](obj); ok && claim.Status.Allocation != nil {
				freed(claim)
			}
		},
	}); err != nil {
		return fmt.Errorf("DeviceQuotas: watching ResourceClaims: %w", err)
	}
	if _, err := r.informers.Core().V1().Pods().Informer().AddEventHandler(q.waiting.handlers()); err != nil {
		return fmt.Errorf("pods waiting for a DeviceQuota: %w", err)
	}
	factory.Start(ctx.Done())
	r.goroutines.Go(func() {
		<-ctx.Done()
		factory.Shutdown()
	})
	syncCtx, cancel := context.WithTimeout(ctx, quotaSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), q.synced) {
		logger.Error(nil, "DeviceQuotas could not be listed in time: they are enforced from when they can be (check drascope-scheduler's RBAC for devicequotas)", "waited", quotaSyncTimeout)
	}
	r.quotas = q
	r.whileLeading(ctx, func() { r.writeQuotaStatus(ctx, client.DrascopeV1alpha1(), q.lister) })
	return nil
}

// quotaStatusInterval is how often the leader compares each DeviceQuota's
// status with what its namespace uses.
const quotaStatusInterval = 2 * time.Second

// writeQuotaStatus keeps each DeviceQuota's status at what its namespace
// uses (devicequota.Status), in flight included: every
// quotaStatusInterval, it writes the status of each quota whose usage
// changed, and no other, until ctx ends.
func (r *Runtime) writeQuotaStatus(ctx context.Context, client typedv1alpha1.DeviceQuotasGetter, lister listers.DeviceQuotaLister) {
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		quotas, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		used := map[string]devicequota.Usage{}
		for _, quota := range quotas {
			usage, ok := used[quota.Namespace]
			if !ok {
				usage = devicequota.UsageOf(r.pools.AllocatedIn(quota.Namespace), r.pools.Device)
				used[quota.Namespace] = usage
			}
			status := devicequota.Status(quota, usage)
			if apiequality.Semantic.DeepEqual(status, quota.Status) {
				continue
			}
			updated := quota.DeepCopy()
			updated.Status = status
			if _, err := client.DeviceQuotas(quota.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				// The next round writes it again.
				logger.V(2).Info("Could not write a DeviceQuota's status", "deviceQuota", klog.KObj(quota), "err", err)
			}
		}
	}, quotaStatusInterval)
}

// servesDeviceQuotas asks the apiserver's discovery, within
// discoveryTimeout, whether it serves DeviceQuotas.
func servesDeviceQuotas(ctx context.Context, client versioned.Interface) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	resources, err := discovery.ToDiscoveryInterfaceWithContext(client.Discovery()).ServerResourcesForGroupVersionWithContext(ctx, v1alpha1.SchemeGroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	for _, resource := range resources.APIResources {
		if resource.Name == v1alpha1.DeviceQuotas.Resource {
			return true, nil
		}
	}
	return false, nil
}

// DeviceQuotas returns the namespace's DeviceQuotas; enforced is false
// when none are enforced: the apiserver does not serve them, or they have
// not been listed yet.
func (r *Runtime) DeviceQuotas(namespace string) (quotas []*v1alpha1.DeviceQuota, enforced bool) {
	q := r.quotas
	if q == nil || !q.synced() {
		return nil, false
	}
	quotas, err := q.lister.DeviceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return nil, false
	}
	return quotas, true
}

// RetryWhenQuotaChanges remembers a pod refused for a DeviceQuota: a
// change of its namespace's quotas, or an allocation of its namespace
// given up (RetryQuotaWaiters), retries it.
func (r *Runtime) RetryWhenQuotaChanges(pod *v1.Pod) {
	if q := r.quotas; q != nil {
		q.waiting.add(pod)
	}
}

// RetryQuotaWaiters retries the pods of the namespace that a DeviceQuota
// refused: an allocation there was given up before it was written, which
// frees quota without any API event.
func (r *Runtime) RetryQuotaWaiters(logger klog.Logger, namespace string) {
	if q := r.quotas; q != nil {
		q.waiting.activateWhere(logger, "An allocation in the namespace was given up, retrying the pods a DeviceQuota refused",
			func(pod *v1.Pod) bool { return pod.Namespace == namespace })
	}
}
