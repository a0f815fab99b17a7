package drascope

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// claimHolders are the nodes where pods that use claims run, by the pods'
// priority, kept from the scheduler's pod informer. Node pruning keeps,
// for a pod that may preempt, the nodes where pods of lower priority hold
// claims (DRA-aware preemption must reach them); reading that from the
// snapshot cost a look at every node per pod. Here it costs a look at the
// priorities below the pod's, and at their nodes.
//
// The informer lags the snapshot by the pods the scheduler assumed and has
// not seen bound yet, for as long as their binding takes (PreBind writes
// their claims first). Reserve records this profile's pods at once, and
// Unreserve forgets them (claimwrites.go); a pod another profile of the
// process reserved counts from its binding event on, as a pod bound by
// another scheduler does. Safe for concurrent use.
type claimHolders struct {
	mu   sync.RWMutex
	pods map[types.UID]claimHolder
	// byPriority counts, per priority and node, the pods holding claims.
	byPriority map[int32]map[string]int
}

type claimHolder struct {
	node     string
	priority int32
}

// set records a pod as it is now: a holder when it is bound to a node and
// uses claims, otherwise none.
func (c *claimHolders) set(pod *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(pod.UID)
	if pod.Spec.NodeName == "" || len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	h := claimHolder{node: pod.Spec.NodeName, priority: corev1helpers.PodPriority(pod)}
	if c.pods == nil {
		c.pods, c.byPriority = map[types.UID]claimHolder{}, map[int32]map[string]int{}
	}
	c.pods[pod.UID] = h
	if c.byPriority[h.priority] == nil {
		c.byPriority[h.priority] = map[string]int{}
	}
	c.byPriority[h.priority][h.node]++
}

// forget removes a pod.
func (c *claimHolders) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(uid)
}

func (c *claimHolders) forgetLocked(uid types.UID) {
	h, ok := c.pods[uid]
	if !ok {
		return
	}
	delete(c.pods, uid)
	nodes := c.byPriority[h.priority]
	if nodes[h.node]--; nodes[h.node] == 0 {
		delete(nodes, h.node)
	}
	if len(nodes) == 0 {
		delete(c.byPriority, h.priority)
	}
}

// keepPreemptible adds the nodes (those has knows) where a pod of lower
// priority than pod holds claims: preempting it may free devices there.
func (c *claimHolders) keepPreemptible(candidates sets.Set[string], pod *v1.Pod, has func(node string) bool) {
	priority := corev1helpers.PodPriority(pod)
	c.mu.RLock()
	defer c.mu.RUnlock()
	for p, nodes := range c.byPriority {
		if p >= priority {
			continue
		}
		for node := range nodes {
			if !candidates.Has(node) && has(node) {
				candidates.Insert(node)
			}
		}
	}
}

// handlers keep the holders from pod events.
func (c *claimHolders) handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.setObject(obj) },
		UpdateFunc: func(_, obj any) { c.setObject(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				c.forget(pod.UID)
			}
		},
	}
}

func (c *claimHolders) setObject(obj any) {
	if pod, ok := obj.(*v1.Pod); ok {
		c.set(pod)
	}
}
