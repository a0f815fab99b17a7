package draruntime

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/informerevents"
)

// waitingPods are the pods refused while devices were withheld as
// Unhealthy, or scheduled while release holds kept devices in use; they are
// retried when a device recovers or a hold ends, which no API event
// announces (the end of a hold time; a released allocation found never
// written).
type waitingPods struct {
	activator fwk.PodActivator
	mu        sync.Mutex
	pods      map[types.UID]*v1.Pod
}

func newWaitingPods(activator fwk.PodActivator) *waitingPods {
	return &waitingPods{activator: activator, pods: map[types.UID]*v1.Pod{}}
}

// handlers forget a waiting pod once it is bound or deleted: only
// activate would forget it otherwise, and a device that never recovers
// would keep every pod ever refused near it.
func (w *waitingPods) handlers() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj interface{}) {
			if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
				w.remove(pod.UID)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if pod, ok := informerevents.Object[*v1.Pod](obj); ok {
				w.remove(pod.UID)
			}
		},
	}
}

func (w *waitingPods) remove(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pods, uid)
}

// len is the number of waiting pods.
func (w *waitingPods) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pods)
}

func (w *waitingPods) add(pod *v1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[pod.UID] = pod
}

// activate retries every waiting pod and forgets them: a pod refused again
// is added again by Filter. Pods that were deleted or scheduled meanwhile
// are ignored by the scheduling queue, which every profile shares.
func (w *waitingPods) activate(logger klog.Logger, why string) {
	w.mu.Lock()
	if len(w.pods) == 0 {
		w.mu.Unlock()
		return
	}
	pods := make(map[string]*v1.Pod, len(w.pods))
	for _, pod := range w.pods {
		pods[pod.Namespace+"/"+pod.Name] = pod
	}
	clear(w.pods)
	w.mu.Unlock()
	logger.V(3).Info(why, "pods", len(pods))
	w.activator.Activate(logger, pods)
}
