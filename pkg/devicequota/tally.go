package devicequota

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Tally sums what a namespace's allocations use, remembering each
// claim's usage (OfAllocation) for as long as the claim holds the same
// allocation object: the scheduler checks a namespace's quotas for every
// pod it places there, and counting every allocation of the namespace
// afresh each time (a device lookup per result) cost a tenth of the
// scheduler's CPU with 2500 claims in one namespace (docs/quota.md,
// "Cost"). Informer and in-flight objects are never changed in place, so
// a claim whose allocation object is the same uses what it used. Safe for
// concurrent use.
type Tally struct {
	mu sync.Mutex
	// byNamespace holds, per namespace summed, the usage of the claims
	// its latest sum saw: a claim gone from the namespace is forgotten at
	// its next sum, a namespace without claims at once.
	byNamespace map[string]map[types.UID]tallied
}

type tallied struct {
	allocation *resourceapi.AllocationResult
	usage      Usage
}

// maxTalliedNamespaces bounds the namespaces remembered; past it, all are
// forgotten and counted afresh.
const maxTalliedNamespaces = 10000

// Sum is what the claims of one namespace (those holding an allocation)
// use, split in two: the claims apart selects, and the others.
func (t *Tally) Sum(namespace string, claims []*resourceapi.ResourceClaim, lookup DeviceLookup, apart func(*resourceapi.ResourceClaim) bool) (others, selected Usage) {
	others, selected = Usage{}, Usage{}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byNamespace == nil || len(t.byNamespace) > maxTalliedNamespaces {
		t.byNamespace = map[string]map[types.UID]tallied{}
	}
	known := t.byNamespace[namespace]
	seen := make(map[types.UID]tallied, len(claims))
	for _, claim := range claims {
		entry, ok := known[claim.UID]
		if !ok || entry.allocation != claim.Status.Allocation {
			entry = tallied{allocation: claim.Status.Allocation, usage: OfAllocation(claim, claim.Status.Allocation, lookup)}
		}
		seen[claim.UID] = entry
		if apart != nil && apart(claim) {
			selected.Add(entry.usage)
		} else {
			others.Add(entry.usage)
		}
	}
	if len(seen) == 0 {
		delete(t.byNamespace, namespace)
	} else {
		t.byNamespace[namespace] = seen
	}
	return others, selected
}
