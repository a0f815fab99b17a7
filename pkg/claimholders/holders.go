// Package claimholders follows, from the scheduler's pod informer, the
// nodes where pods that use ResourceClaims run, by the pods' priority: the
// nodes DRA-aware preemption may free devices on for a pod of higher
// priority. It knows nothing of the scheduler framework.
package claimholders

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Holders are the nodes where pods that use claims run, by the pods'
// priority, kept from the scheduler's pod informer (Handlers). Node
// pruning keeps,
// for a pod that may preempt, the nodes where pods of lower priority hold
// claims (DRA-aware preemption must reach them); reading that from the
// snapshot cost a look at every node per pod. Here it costs a look at the
// priorities below the pod's, and at their nodes.
//
// The informer lags the snapshot by the pods the scheduler assumed and has
// not seen bound yet, for as long as their binding takes (PreBind writes
// their claims first). Reserve records this profile's pods at once, and
// only Unreserve or the pod's bound or deleted state ends such a record:
// the informer's events for the pod still unbound (upstream patches its
// nominatedNodeName before PreBind) leave it. A pod another profile of the
// process reserved counts from its binding event on, as a pod bound by
// another scheduler does. Until the handler has seen the informer's first
// list (synced), nothing is known: pruning then keeps every node for a pod
// that may preempt (pkg/plugins/drascope, prefilter.go). Safe for concurrent use.
type Holders struct {
	mu   sync.RWMutex
	pods map[types.UID]holder
	// byPriority counts, per priority and node, the pods holding claims.
	byPriority map[int32]map[string]int
	// Synced reports whether the handler has seen the informer's first
	// list (the registration's HasSynced); nil: always (tests).
	Synced func() bool
}

type holder struct {
	node     string
	priority int32
	// reserved: recorded by Reserve, not yet seen bound.
	reserved bool
}

// Set records a pod as the informer shows it: a holder when it is bound to
// a node and uses claims. An unbound pod that Reserve recorded stays
// recorded.
func (c *Holders) Set(pod *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pod.Spec.NodeName == "" && c.pods[pod.UID].reserved {
		return
	}
	c.setLocked(pod, pod.Spec.NodeName, false)
}

// Reserve records a pod Reserve placed on node.
func (c *Holders) Reserve(pod *v1.Pod, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(pod, node, true)
}

// Unreserve forgets a pod Reserve recorded, unless the informer has seen
// it bound meanwhile (a binding that succeeded although its call failed).
func (c *Holders) Unreserve(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pods[uid].reserved {
		c.forgetLocked(uid)
	}
}

func (c *Holders) setLocked(pod *v1.Pod, node string, reserved bool) {
	c.forgetLocked(pod.UID)
	if node == "" || len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	h := holder{node: node, priority: corev1helpers.PodPriority(pod), reserved: reserved}
	if c.pods == nil {
		c.pods, c.byPriority = map[types.UID]holder{}, map[int32]map[string]int{}
	}
	c.pods[pod.UID] = h
	if c.byPriority[h.priority] == nil {
		c.byPriority[h.priority] = map[string]int{}
	}
	c.byPriority[h.priority][h.node]++
}

// Forget removes a pod.
func (c *Holders) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(uid)
}

func (c *Holders) forgetLocked(uid types.UID) {
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

// Known reports whether the holders follow the informer yet.
func (c *Holders) Known() bool {
	return c.Synced == nil || c.Synced()
}

// AnyBelow reports whether a pod of lower priority than priority holds
// claims, or the holders are not known yet.
func (c *Holders) AnyBelow(priority int32) bool {
	if !c.Known() {
		return true
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for p := range c.byPriority {
		if p < priority {
			return true
		}
	}
	return false
}

// KeepPreemptible adds the nodes (those has knows) where a pod of lower
// priority than pod holds claims: preempting it may free devices there.
func (c *Holders) KeepPreemptible(candidates sets.Set[string], pod *v1.Pod, has func(node string) bool) {
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

// Handlers keep the holders from pod events.
func (c *Holders) Handlers() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.setObject(obj) },
		UpdateFunc: func(_, obj any) { c.setObject(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				c.Forget(pod.UID)
			}
		},
	}
}

func (c *Holders) setObject(obj any) {
	if pod, ok := obj.(*v1.Pod); ok {
		c.Set(pod)
	}
}
