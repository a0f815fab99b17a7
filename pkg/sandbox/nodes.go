package sandbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// kubelets plays kubelet's part for the simulated nodes: it creates them
// Ready, moves the pods bound to them to Running, writes the health of
// their devices into pod status (KEP-4680), and finishes the deletion of
// their pods.
type kubelets struct {
	client kubernetes.Interface
	nodes  []string
	pods   cache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// health of devices ("<driver>/<pool>/<device>"), Healthy when absent.
	health map[string]v1.ResourceHealth
}

func startKubelets(ctx context.Context, client kubernetes.Interface, nodes []string) (*kubelets, error) {
	k := &kubelets{
		client: client,
		nodes:  nodes,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		health: map[string]v1.ResourceHealth{},
	}
	for _, name := range nodes {
		if err := k.createNode(ctx, name); err != nil {
			return nil, err
		}
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

func (k *kubelets) createNode(ctx context.Context, name string) error {
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("32"),
		v1.ResourceMemory: resource.MustParse("256Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	node, err := k.client.CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "type": "sandbox"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	node.Status = v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "simulated by drascope-sandbox", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if _, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting node %s Ready: %w", name, err)
	}
	return nil
}

// setHealth records a device's health, as its driver would report it to
// kubelet, and rewrites the status of the pods that use it.
func (k *kubelets) setHealth(resourceID string, health v1.ResourceHealthStatus, message string) {
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

func (k *kubelets) work(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		key, shutdown := k.queue.Get()
		if shutdown {
			return
		}
		if err := k.sync(ctx, key); err != nil {
			logger.V(2).Info("Simulated kubelet: retrying", "pod", key, "err", err)
			k.queue.AddRateLimited(key)
		} else {
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

// sync brings one pod to where kubelet would have it.
func (k *kubelets) sync(ctx context.Context, key string) error {
	obj, exists, err := k.pods.GetStore().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*v1.Pod)
	if !slices.Contains(k.nodes, pod.Spec.NodeName) {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		// The containers are stopped; kubelet confirms the deletion.
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	status, err := k.status(ctx, pod)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(status, pod.Status) {
		return nil
	}
	updated := pod.DeepCopy()
	updated.Status = status
	_, err = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// status is a running pod's status as kubelet writes it, with the health of
// every device its containers' claims hold.
func (k *kubelets) status(ctx context.Context, pod *v1.Pod) (v1.PodStatus, error) {
	status := *pod.Status.DeepCopy()
	started := metav1.NewTime(pod.CreationTimestamp.Add(time.Second))
	if status.StartTime != nil {
		started = *status.StartTime
	}
	status.Phase = v1.PodRunning
	status.StartTime = &started
	status.HostIP = "127.0.0.1"
	status.Conditions = mergeConditions(status.Conditions,
		v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue},
		v1.PodCondition{Type: v1.ContainersReady, Status: v1.ConditionTrue},
		v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue})
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}},
		}
		for _, claim := range c.Resources.Claims {
			entry, err := k.claimHealth(ctx, pod, claim)
			if err != nil {
				return status, err
			}
			if entry != nil {
				cs.AllocatedResourcesStatus = append(cs.AllocatedResourcesStatus, *entry)
			}
		}
		status.ContainerStatuses = append(status.ContainerStatuses, cs)
	}
	return status, nil
}

// claimHealth is the allocatedResourcesStatus entry of one container claim:
// every device its ResourceClaim holds for the request, with its health.
func (k *kubelets) claimHealth(ctx context.Context, pod *v1.Pod, ref v1.ResourceClaim) (*v1.ResourceStatus, error) {
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

// mergeConditions sets each condition, keeping its transition time when
// its status does not change, and leaves the others (PodScheduled) alone.
func mergeConditions(existing []v1.PodCondition, set ...v1.PodCondition) []v1.PodCondition {
	out := slices.Clone(existing)
	for _, c := range set {
		i := slices.IndexFunc(out, func(e v1.PodCondition) bool { return e.Type == c.Type })
		if i >= 0 && out[i].Status == c.Status {
			continue
		}
		c.LastTransitionTime = metav1.Now()
		if i >= 0 {
			out[i] = c
		} else {
			out = append(out, c)
		}
	}
	return out
}
