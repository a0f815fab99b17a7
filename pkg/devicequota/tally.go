package devicequota

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Tally sums what a namespace's allocations use, remembering each
// claim's usage (OfAllocation) for as long as the claim holds the same
// allocation object and no slice changed: the scheduler checks a
// namespace's quotas for every pod it places there, and counting every
// allocation of the namespace afresh each time (a device lookup per
// result) cost a sixth of the scheduler's CPU with 2500 claims in one
// namespace (docs/quota.md, "Cost"). Informer and in-flight objects are
// never changed in place, so a claim whose allocation object is the same
// uses what it used, unless its devices' counters changed with their
// slices; a usage with a device not found is never remembered. Safe for
// concurrent use.
type Tally struct {
	mu sync.Mutex
	// slices is the slices' change count the remembered usages were
	// counted at.
	slices uint64
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
// use, split in two: the claims apart selects (nil: none), and the
// others. slicesChanged counts the slices' changes lookup reads from, read
// before lookup is called (poolcache.Cache.SlicesChanged).
func (t *Tally) Sum(namespace string, claims []*resourceapi.ResourceClaim, lookup DeviceLookup, slicesChanged uint64, apart func(*resourceapi.ResourceClaim) bool) (others, selected Usage) {
	others, selected = Usage{}, Usage{}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byNamespace == nil || len(t.byNamespace) > maxTalliedNamespaces || t.slices != slicesChanged {
		t.byNamespace, t.slices = map[string]map[types.UID]tallied{}, slicesChanged
	}
	missing := false
	var found DeviceLookup
	if lookup != nil {
		found = func(id structured.DeviceID) *resourceapi.Device {
			device := lookup(id)
			missing = missing || device == nil
			return device
		}
	}
	known := t.byNamespace[namespace]
	seen := make(map[types.UID]tallied, len(claims))
	for _, claim := range claims {
		entry, ok := known[claim.UID]
		if !ok || entry.allocation != claim.Status.Allocation {
			missing = false
			entry = tallied{allocation: claim.Status.Allocation, usage: OfAllocation(claim, claim.Status.Allocation, found)}
			if missing {
				// Not remembered: counted again once the device is known.
				entry.allocation = nil
			}
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
