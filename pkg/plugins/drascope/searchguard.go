package drascope

import (
	fwk "k8s.io/kube-scheduler/framework"
)

// cannotAllocate is upstream's Filter reason for claims the allocator
// found no devices for on a node; the guard below gives the same.
const cannotAllocate = "cannot allocate all claims"

// guardedFrom is how many devices a pod must ask for before Filter checks
// that a node has enough free ones before upstream's allocator searches.
// The allocator is a backtracking search with no such check: asked for
// more identical devices than a node has free, it tries every assignment
// of devices to requests before it gives up, and only upstream's Filter
// timeout (10s by default) ends it, for each node and each attempt, while
// the scheduling loop, which serves every profile, waits. A pod asking
// for one or two devices cannot make it search long; for those the check
// would only cost time on the hot path.
const guardedFrom = 3

// tooFewDevices reports whether the node certainly cannot hold the pod's
// claims because they ask for more devices of their drivers than the node
// has free (dryrun.Node.MayFit: counters included, selectors not), so that
// Filter refuses the node without upstream's search. Devices withheld as
// Unhealthy count as free here: Filter's own refusal explains those, and
// retries the pod when they recover. Without a cycle view (no what-if)
// it does not tell.
func (w *whatIf) tooFewDevices(nodeInfo fwk.NodeInfo) bool {
	if w == nil || !w.guarded || nodeInfo.Node() == nil {
		return false
	}
	n := w.cycle.Node(nodeInfo.Node())
	n.FreeKept(w.withheld)
	return !n.MayFit(w.claims)
}
