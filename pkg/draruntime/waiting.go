package draruntime

import (
	"cmp"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/pkg/informerevents"
)

// waitingPods are the pods refused while devices were withheld as
// Unhealthy, or scheduled while release holds kept devices in use; they are
// retried when a device recovers or a hold ends, which no API event
// announces (the end of a hold time; a released allocation found never
// written).
//
// A retry moves pods to the active queue past their backoff, so one
// recovery retries at most activateBatch of them, the longest waiting
// first, and the next batch activateInterval later: a device that recovers
// beside thousands of pending pods must not put them all in front of every
// other pod at once.
type waitingPods struct {
	activator fwk.PodActivator
	clock     clock.Clock
	mu        sync.Mutex
	pods      map[types.UID]waitingPod
	// next numbers the pods in the order they started to wait.
	next uint64
	// due are the pods a retry is still to activate, oldest first;
	// draining is set while a later batch is scheduled.
	due      []types.UID
	draining bool
}

type waitingPod struct {
	pod   *v1.Pod
	since uint64
	// mark is the caller's: the quota epoch the pod was refused at.
	mark uint64
	// due: in the due list.
	due bool
}

const (
	// activateBatch bounds the pods one retry moves to the active queue.
	activateBatch = 64
	// activateInterval is the pause between two batches of one retry.
	activateInterval = time.Second
)

func newWaitingPods(activator fwk.PodActivator, clk clock.Clock) *waitingPods {
	return &waitingPods{activator: activator, clock: clk, pods: map[types.UID]waitingPod{}}
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

// remove forgets a pod; a due list entry of a pod gone is skipped.
func (w *waitingPods) remove(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pods, uid)
}

// byNamespace counts the waiting pods by namespace.
func (w *waitingPods) byNamespace() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := map[string]int{}
	for _, waiting := range w.pods {
		counts[waiting.pod.Namespace]++
	}
	return counts
}

// len is the number of waiting pods.
func (w *waitingPods) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pods)
}

func (w *waitingPods) add(pod *v1.Pod) {
	w.addMarked(pod, 0)
}

// addMarked is add, with the caller's mark, which activateWhere hands
// back.
func (w *waitingPods) addMarked(pod *v1.Pod, mark uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if waiting, ok := w.pods[pod.UID]; ok {
		waiting.pod, waiting.mark = pod, mark
		w.pods[pod.UID] = waiting
		return
	}
	w.pods[pod.UID] = waitingPod{pod: pod, since: w.next, mark: mark}
	w.next++
}

// activate retries every waiting pod, in batches, and forgets each as it
// is retried: a pod refused again is added again by Filter, and waits for
// the next recovery rather than this one's later batches. Pods that were
// deleted or scheduled meanwhile are ignored by the scheduling queue,
// which every profile shares.
func (w *waitingPods) activate(logger klog.Logger, why string) {
	w.activateWhere(logger, why, nil)
}

// activateWhere is activate for the waiting pods that of selects, by the
// pod and its mark (nil: every one).
func (w *waitingPods) activateWhere(logger klog.Logger, why string, of func(pod *v1.Pod, mark uint64) bool) {
	w.mu.Lock()
	var added []types.UID
	for uid, waiting := range w.pods {
		if !waiting.due && (of == nil || of(waiting.pod, waiting.mark)) {
			waiting.due = true
			w.pods[uid] = waiting
			added = append(added, uid)
		}
	}
	slices.SortFunc(added, func(a, b types.UID) int { return cmp.Compare(w.pods[a].since, w.pods[b].since) })
	w.due = append(w.due, added...)
	draining := w.draining
	w.mu.Unlock()
	if draining {
		// A batch is scheduled: the new pods wait their turn behind
		// those already due, so that recoveries in a row keep the pace.
		return
	}
	w.activateNext(logger, why)
}

// activateNext activates the next batch of due pods, and schedules the one
// after it.
func (w *waitingPods) activateNext(logger klog.Logger, why string) {
	w.mu.Lock()
	batch := map[string]*v1.Pod{}
	for len(w.due) > 0 && len(batch) < activateBatch {
		uid := w.due[0]
		w.due = w.due[1:]
		if waiting, ok := w.pods[uid]; ok && waiting.due {
			batch[waiting.pod.Namespace+"/"+waiting.pod.Name] = waiting.pod
			delete(w.pods, uid)
		}
	}
	left := len(w.due)
	if left > 0 && !w.draining {
		w.draining = true
		after := w.clock.After(activateInterval)
		go func() {
			<-after
			w.mu.Lock()
			w.draining = false
			w.mu.Unlock()
			w.activateNext(logger, why)
		}()
	}
	w.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	logger.V(3).Info(why, "pods", len(batch), "stillDue", left)
	w.activator.Activate(logger, batch)
}
