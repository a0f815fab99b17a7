package draruntime

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
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
	"github.com/drascope/drascope/pkg/metrics"
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
	// epoch orders, across namespaces, the changes that may let a refused
	// pod in (a quota changed, an allocation released or given up), the
	// refusals and the allocations reserved; changes holds each
	// namespace's latest change. A refusal that read the usage before
	// its namespace's latest change retries at once
	// (RetryWhenQuotaChanges), so no change is missed between reading the
	// usage and waiting; an allocation given up retries only the pods
	// refused while it was in flight (RetryQuotaWaiters), so that two
	// pod groups at their quotas cannot retry each other without pause.
	mu      sync.Mutex
	epoch   uint64
	changes map[string]uint64
}

// maxQuotaChanges bounds the namespaces whose latest change is kept;
// past it, those without DeviceQuotas and waiting pods are forgotten.
const maxQuotaChanges = 10000

// changed records a change of the namespace and retries its waiting pods
// that of selects (by pod and the epoch it was refused at; nil: all).
func (q *deviceQuotas) changed(logger klog.Logger, namespace, why string, of func(pod *v1.Pod, refusedAt uint64) bool) {
	q.mu.Lock()
	q.epoch++
	q.changes[namespace] = q.epoch
	if len(q.changes) > maxQuotaChanges {
		waiting := q.waiting.byNamespace()
		for ns := range q.changes {
			if quotas, err := q.lister.DeviceQuotas(ns).List(labels.Everything()); (err != nil || len(quotas) == 0) && waiting[ns] == 0 {
				delete(q.changes, ns)
			}
		}
	}
	q.mu.Unlock()
	q.waiting.activateWhere(logger, why, func(pod *v1.Pod, refusedAt uint64) bool {
		return pod.Namespace == namespace && (of == nil || of(pod, refusedAt))
	})
}

// latest returns the epoch of the namespace's latest change.
func (q *deviceQuotas) latest(namespace string) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changes[namespace]
}

// tick advances the epoch and returns it.
func (q *deviceQuotas) tick() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.epoch++
	return q.epoch
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
	served, err := servesResource(ctx, client.Discovery(), v1alpha1.SchemeGroupVersion.String(), v1alpha1.DeviceQuotas.Resource)
	if err != nil {
		logger.Info("Could not ask the apiserver whether it serves DeviceQuotas; watching them anyway", "err", err)
	} else if !served {
		logger.Info("Not enforcing DeviceQuotas: the apiserver does not serve " + v1alpha1.DeviceQuotas.GroupResource().String() + " (install manifests/crds/devicequotas.drascope.dev.yaml)")
		return nil
	}
	factory := externalversions.NewSharedInformerFactory(client, 0)
	informer := factory.Drascope().V1alpha1().DeviceQuotas()
	q := &deviceQuotas{lister: informer.Lister(), synced: informer.Informer().HasSynced, waiting: newWaitingPods(h, clock.RealClock{}), changes: map[string]uint64{}}
	retry := func(obj interface{}) {
		if quota, ok := informerevents.Object[*v1alpha1.DeviceQuota](obj); ok {
			q.changed(logger, quota.Namespace, "A DeviceQuota changed, retrying the pods of its namespace that it refused", nil)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    retry,
		UpdateFunc: func(_, obj interface{}) { retry(obj) },
		DeleteFunc: retry,
	}); err != nil {
		return fmt.Errorf("DeviceQuotas: %w", err)
	}
	// A claim deallocated or deleted frees its namespace's quota, once the
	// side cache, which Reserve counts from, no longer counts it.
	r.pools.OnReleased(func(namespace string) {
		q.changed(logger, namespace, "An allocation was released, retrying the pods of its namespace that a DeviceQuota refused", nil)
	})
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

// NamespaceUsage is what the namespace's allocations use, as the side
// cache has them (in flight included), split in two: the claims apart
// selects (nil: none), and the others. Each claim's usage is counted once
// per allocation (devicequota.Tally), for every profile.
func (r *Runtime) NamespaceUsage(namespace string, apart func(*resourceapi.ResourceClaim) bool) (others, selected devicequota.Usage) {
	slices := r.pools.SlicesChanged()
	return r.quotaTally.Sum(namespace, r.pools.AllocatedIn(namespace), r.pools.Device, slices, apart)
}

// namespaceUsage returns what each namespace's allocations use, counted
// once per namespace for one pass over the quotas.
func (r *Runtime) namespaceUsage() func(namespace string) devicequota.Usage {
	used := map[string]devicequota.Usage{}
	return func(namespace string) devicequota.Usage {
		usage, ok := used[namespace]
		if !ok {
			usage, _ = r.NamespaceUsage(namespace, nil)
			used[namespace] = usage
		}
		return usage
	}
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
		usageIn := r.namespaceUsage()
		for _, quota := range quotas {
			status := devicequota.Status(quota, usageIn(quota.Namespace))
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

// QuotaSeen is what a DeviceQuota's check saw of the namespace before it
// read the quotas and the usage: hand it to RetryWhenQuotaChanges when
// the check refuses.
type QuotaSeen struct{ changed uint64 }

// QuotaNow returns what the namespace's quota check sees now.
func (r *Runtime) QuotaNow(namespace string) QuotaSeen {
	if q := r.quotas; q != nil {
		return QuotaSeen{changed: q.latest(namespace)}
	}
	return QuotaSeen{}
}

// QuotaReserved marks allocations a quota check let in, and returns the
// epoch to hand RetryQuotaWaiters if they are given up.
func (r *Runtime) QuotaReserved() uint64 {
	if q := r.quotas; q != nil {
		return q.tick()
	}
	return 0
}

// RetryWhenQuotaChanges remembers a pod refused for a DeviceQuota on what
// it saw: a change of its namespace's quotas, a claim released there, or
// an allocation it counted given up (RetryQuotaWaiters) retries it, and a
// change since it looked retries it now.
func (r *Runtime) RetryWhenQuotaChanges(logger klog.Logger, pod *v1.Pod, seen QuotaSeen) {
	q := r.quotas
	if q == nil {
		return
	}
	refusedAt := q.tick()
	q.waiting.addMarked(pod, refusedAt)
	if q.latest(pod.Namespace) != seen.changed {
		q.waiting.activateWhere(logger, "Its namespace changed while a DeviceQuota refused the pod, retrying it",
			func(waiting *v1.Pod, _ uint64) bool { return waiting.UID == pod.UID })
	}
}

// RetryQuotaWaiters retries the pods of the given-up pod's namespace that
// a DeviceQuota refused while its allocation, reserved at epoch reserved
// (QuotaReserved), was in flight: it was given up before it was written,
// which frees quota without any API event. Pods refused before it was
// reserved did not count it, and members of the given-up pod's own group
// are left to the group's retry.
func (r *Runtime) RetryQuotaWaiters(logger klog.Logger, givenUp *v1.Pod, reserved uint64) {
	q := r.quotas
	if q == nil {
		return
	}
	group := podGroup(givenUp)
	q.changed(logger, givenUp.Namespace, "An allocation in the namespace was given up, retrying the pods a DeviceQuota refused while it was in flight",
		func(pod *v1.Pod, refusedAt uint64) bool {
			return refusedAt > reserved && (group == "" || podGroup(pod) != group)
		})
}

// podGroup is the name of the pod's PodGroup, "" for none.
func podGroup(pod *v1.Pod) string {
	if pod.Spec.SchedulingGroup == nil || pod.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *pod.Spec.SchedulingGroup.PodGroupName
}

// DeviceQuotas are the amounts every DeviceQuota limits, with what its
// namespace uses now, in namespace and quota order (at most
// metrics.MaxQuotaSeries), and the pods a quota refused that wait, by
// namespace.
func (s *metricsSource) DeviceQuotas() ([]metrics.QuotaAmount, map[string]int) {
	q := s.r.quotas
	if q == nil || !q.synced() {
		return nil, nil
	}
	quotas, err := q.lister.List(labels.Everything())
	if err != nil {
		return nil, nil
	}
	slices.SortFunc(quotas, func(a, b *v1alpha1.DeviceQuota) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var amounts []metrics.QuotaAmount
	usageIn := s.r.namespaceUsage()
	for _, quota := range quotas {
		if len(amounts) >= metrics.MaxQuotaSeries {
			break
		}
		usage := usageIn(quota.Namespace)
		for _, limit := range quota.Spec.Limits {
			have := usage[limit.DeviceClassName]
			if have == nil {
				have = &devicequota.Amounts{}
			}
			class := limit.DeviceClassName
			amount := func(name string, used, limit resource.Quantity) {
				amounts = append(amounts, metrics.QuotaAmount{Namespace: quota.Namespace, Quota: quota.Name, Class: class,
					Amount: name, Used: used.AsApproximateFloat64(), Limit: limit.AsApproximateFloat64()})
			}
			if limit.Devices != nil {
				amount("devices", *resource.NewQuantity(have.Devices, resource.DecimalSI), *resource.NewQuantity(*limit.Devices, resource.DecimalSI))
			}
			for _, name := range slices.Sorted(maps.Keys(limit.Counters)) {
				amount("counter "+name, have.Counters[name], limit.Counters[name])
			}
			for _, name := range slices.Sorted(maps.Keys(limit.Capacity)) {
				amount("capacity "+string(name), have.Capacity[name], limit.Capacity[name])
			}
		}
	}
	return amounts, q.waiting.byNamespace()
}
