package health

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/pkg/informerevents"
)

// terminalPhases selects pods that ended: the scheduler's own pod informer
// lists only the others (status.phase!=Succeeded,status.phase!=Failed).
var terminalPhases = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(v1.PodPending)),
	fields.OneTermNotEqualSelector("status.phase", string(v1.PodRunning)),
	fields.OneTermNotEqualSelector("status.phase", string(v1.PodUnknown)),
).String()

// NewTerminalPodInformer watches pods that ended, Failed or Succeeded: the
// final status of a batch pod whose GPU died says so, and the scheduler's
// pod informer never sees it (it gets a delete carrying the previous
// status). Only what health needs is kept of each pod, so a cluster that
// keeps many finished pods pays a few hundred bytes for each.
func NewTerminalPodInformer(client kubernetes.Interface) (cache.SharedIndexInformer, error) {
	informer := coreinformers.NewFilteredPodInformer(client, v1.NamespaceAll, 0, cache.Indexers{},
		func(options *metav1.ListOptions) { options.FieldSelector = terminalPhases })
	if err := informer.SetTransform(slimTerminalPod); err != nil {
		return nil, fmt.Errorf("informer of finished pods: %w", err)
	}
	return informer, nil
}

// slimTerminalPod keeps what ObservePod and the trust check read.
func slimTerminalPod(obj interface{}) (interface{}, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	meta := metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	if len(pod.Spec.ResourceClaims) == 0 {
		// Nothing to read: its name is all the store needs, and a v1.Pod,
		// even empty, is a kilobyte.
		return &metav1.PartialObjectMetadata{ObjectMeta: meta}, nil
	}
	slim := &v1.Pod{ObjectMeta: meta}
	slim.Spec.NodeName = pod.Spec.NodeName
	slim.Spec.ResourceClaims = pod.Spec.ResourceClaims
	slim.Status.Phase = pod.Status.Phase
	slim.Status.ResourceClaimStatuses = pod.Status.ResourceClaimStatuses
	slim.Status.InitContainerStatuses = slimStatuses(pod.Status.InitContainerStatuses)
	slim.Status.ContainerStatuses = slimStatuses(pod.Status.ContainerStatuses)
	slim.Status.EphemeralContainerStatuses = slimStatuses(pod.Status.EphemeralContainerStatuses)
	return slim, nil
}

func slimStatuses(statuses []v1.ContainerStatus) []v1.ContainerStatus {
	var slim []v1.ContainerStatus
	for _, s := range statuses {
		if len(s.AllocatedResourcesStatus) > 0 {
			slim = append(slim, v1.ContainerStatus{Name: s.Name, AllocatedResourcesStatus: s.AllocatedResourcesStatus})
		}
	}
	return slim
}

// AddPodHandlers feeds the cache from the scheduler's pod informer (which
// it runs anyway, so this adds no watch) and from terminal, the informer of
// finished pods (NewTerminalPodInformer).
// It returns when each handler has seen every pod that existed when added.
func (c *Cache) AddPodHandlers(logger klog.Logger, pods, terminal cache.SharedIndexInformer) ([]cache.InformerSynced, error) {
	running, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.observe(logger, obj) },
		UpdateFunc: func(_, obj interface{}) { c.observe(logger, obj) },
		DeleteFunc: func(obj interface{}) {
			pod := podOf(obj)
			if pod == nil {
				return
			}
			c.podLeft(logger, pod.UID, finishedIn(terminal, pod))
		},
	})
	if err != nil {
		return nil, err
	}
	finished, err := terminal.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.observe(logger, obj) },
		UpdateFunc: func(_, obj interface{}) { c.observe(logger, obj) },
		DeleteFunc: func(obj interface{}) {
			if pod := podOf(obj); pod != nil {
				c.podDeleted(logger, pod.UID)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return []cache.InformerSynced{running.HasSynced, finished.HasSynced}, nil
}

// AddClaimHandlers completes the holdings of pods from the claim
// informer; see observeClaim.
func (c *Cache) AddClaimHandlers(logger klog.Logger, claims cache.SharedIndexInformer) error {
	observe := func(obj interface{}) {
		if claim, ok := obj.(*resourceapi.ResourceClaim); ok {
			c.observeClaim(logger, claim)
		}
	}
	_, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj interface{}) { observe(obj) },
	})
	return err
}

func (c *Cache) observe(logger klog.Logger, obj interface{}) {
	if pod, ok := obj.(*v1.Pod); ok {
		c.ObservePod(logger, pod)
	}
}

// finishedIn reports whether the terminal-pod informer already has the
// pod, which then left the scheduler's informer by finishing.
func finishedIn(terminal cache.SharedIndexInformer, pod *v1.Pod) bool {
	obj, exists, err := terminal.GetStore().GetByKey(pod.Namespace + "/" + pod.Name)
	if err != nil || !exists {
		return false
	}
	p, ok := obj.(*v1.Pod)
	return ok && p.UID == pod.UID
}

func podOf(obj interface{}) *v1.Pod {
	pod, _ := informerevents.Object[*v1.Pod](obj)
	return pod
}
