package draruntime

import (
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podsWithClaims keeps, from the pod informer's events, the pods that use
// ResourceClaims and have not finished, so that a scrape counts them without
// listing every pod of the cluster: with tens of thousands of pods, most of
// them long bound, that list was what a scrape cost (BenchmarkMetricsScrape).
// Pods are keyed as the informer keys them, by namespace and name: after a
// relist, a pod deleted and made again under its name arrives as an update
// from the old pod to the new one, with no delete between.
type podsWithClaims struct {
	mu sync.Mutex
	// followed are the pods with claims that have not finished.
	followed map[string]followedPod
	// byScheduler counts the followed pods per spec.schedulerName.
	byScheduler map[string]int
	// unbound are the followed pods that are pending, not bound to a node
	// and not being deleted: the only ones that may wait for a device.
	unbound map[string]*v1.Pod
}

type followedPod struct {
	uid       types.UID
	scheduler string
}

func newPodsWithClaims() *podsWithClaims {
	return &podsWithClaims{followed: map[string]followedPod{}, byScheduler: map[string]int{}, unbound: map[string]*v1.Pod{}}
}

func podKey(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// set follows an added or updated pod.
func (p *podsWithClaims) set(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := podKey(pod)
	if old, ok := p.followed[key]; ok && old.uid != pod.UID {
		// Another pod of the same name: the old one is gone.
		p.forget(key)
	}
	if len(pod.Spec.ResourceClaims) == 0 || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		p.forget(key)
		return
	}
	if _, ok := p.followed[key]; !ok {
		p.followed[key] = followedPod{uid: pod.UID, scheduler: pod.Spec.SchedulerName}
		p.byScheduler[pod.Spec.SchedulerName]++
	}
	if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && pod.Status.Phase == v1.PodPending {
		p.unbound[key] = pod
	} else {
		delete(p.unbound, key)
	}
}

// remove forgets a deleted pod.
func (p *podsWithClaims) remove(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := podKey(pod)
	if old, ok := p.followed[key]; ok && old.uid == pod.UID {
		p.forget(key)
	}
}

// forget stops following the pod under key; the caller holds mu.
func (p *podsWithClaims) forget(key string) {
	old, ok := p.followed[key]
	if !ok {
		return
	}
	delete(p.followed, key)
	delete(p.unbound, key)
	if p.byScheduler[old.scheduler]--; p.byScheduler[old.scheduler] == 0 {
		delete(p.byScheduler, old.scheduler)
	}
}

// counts returns a copy of the per-scheduler counts.
func (p *podsWithClaims) counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.byScheduler)
}

// unboundPods returns the unbound pods; the pods are the informer's and are
// only read.
func (p *podsWithClaims) unboundPods() []*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Values(p.unbound))
}
