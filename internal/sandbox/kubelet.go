package sandbox

import (
	"context"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
)

// simulatedKubelet plays kubelet's part for device health (KEP-4680): for
// every running pod on the simulated nodes it writes into the containers'
// allocatedResourcesStatus the health of each device their claims hold, as
// the simulated driver reports it (Healthy unless setHealth says otherwise).
// KWOK does the rest of kubelet's part: nodes Ready, pods Running, deletions.
type simulatedKubelet struct {
	client kubernetes.Interface
	nodes  []string
	pods   cache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// health of devices ("<driver>/<pool>/<device>"), Healthy when absent.
	health map[string]v1.ResourceHealth
}

func startSimulatedKubelet(ctx context.Context, client kubernetes.Interface, nodes []string) (*simulatedKubelet, error) {
	k := &simulatedKubelet{
		client: client,
		nodes:  nodes,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		health: map[string]v1.ResourceHealth{},
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	k.pods = factory.Core().V1().Pods().Informer()
	enqueue := func(obj interface{}) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := k.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	for range 2 {
		go k.work(ctx)
	}
	return k, nil
}

// setHealth records a device's health, as its driver would report it to
// kubelet, and rewrites the status of the pods that use it.
func (k *simulatedKubelet) setHealth(resourceID string, health v1.ResourceHealthStatus, message string) {
	k.mu.Lock()
	h := v1.ResourceHealth{ResourceID: v1.ResourceID(resourceID), Health: health}
	if message != "" {
		h.Message = &message
	}
	k.health[resourceID] = h
	k.mu.Unlock()
	for _, key := range k.pods.GetStore().ListKeys() {
		k.queue.Add(key)
	}
}

func (k *simulatedKubelet) work(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		key, shutdown := k.queue.Get()
		if shutdown {
			return
		}
		if err := k.sync(ctx, key); err != nil {
			logger.V(2).Info("Device health report: retrying", "pod", key, "err", err)
			k.queue.AddRateLimited(key)
		} else {
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

// sync writes the device health of one running pod.
func (k *simulatedKubelet) sync(ctx context.Context, key string) error {
	obj, exists, err := k.pods.GetStore().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*v1.Pod)
	if !slices.Contains(k.nodes, pod.Spec.NodeName) || pod.DeletionTimestamp != nil || pod.Status.Phase != v1.PodRunning {
		return nil
	}
	updated := pod.DeepCopy()
	for i := range updated.Status.ContainerStatuses {
		status := &updated.Status.ContainerStatuses[i]
		status.AllocatedResourcesStatus = nil
		for _, c := range pod.Spec.Containers {
			if c.Name != status.Name {
				continue
			}
			for _, claim := range c.Resources.Claims {
				entry, err := k.claimHealth(ctx, pod, claim)
				if err != nil {
					return err
				}
				if entry != nil {
					status.AllocatedResourcesStatus = append(status.AllocatedResourcesStatus, *entry)
				}
			}
		}
	}
	if equality.Semantic.DeepEqual(updated.Status, pod.Status) {
		return nil
	}
	_, err = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// claimHealth is the allocatedResourcesStatus entry of one container claim:
// every device its ResourceClaim holds for the request, with its health.
func (k *simulatedKubelet) claimHealth(ctx context.Context, pod *v1.Pod, ref v1.ResourceClaim) (*v1.ResourceStatus, error) {
	var podClaim *v1.PodResourceClaim
	for i := range pod.Spec.ResourceClaims {
		if pod.Spec.ResourceClaims[i].Name == ref.Name {
			podClaim = &pod.Spec.ResourceClaims[i]
		}
	}
	if podClaim == nil {
		return nil, nil
	}
	name, _, err := resourceclaim.Name(pod, podClaim)
	if err != nil || name == nil {
		return nil, err
	}
	claim, err := k.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil {
		return nil, err
	}
	entry := &v1.ResourceStatus{Name: v1.ResourceName("claim:" + ref.Name)}
	if ref.Request != "" {
		entry.Name += v1.ResourceName("/" + ref.Request)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, result := range claim.Status.Allocation.Devices.Results {
		if ref.Request != "" && result.Request != ref.Request {
			continue
		}
		id := result.Driver + "/" + result.Pool + "/" + result.Device
		h, ok := k.health[id]
		if !ok {
			h = v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: v1.ResourceHealthStatusHealthy}
		}
		entry.Resources = append(entry.Resources, h)
	}
	return entry, nil
}
