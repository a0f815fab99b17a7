package draruntime

import (
	"time"

	"cmp"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolpublisher"
)

// metricsSource is what the per-pool gauges and the pending-pods gauge read
// at scrape time: the side cache, and the scheduler's pods and claims.
type metricsSource struct {
	*poolcache.Cache
	r *Runtime
	// pods are the pods with claims, kept from the pod informer's events.
	pods    *podsWithClaims
	claims  resourcelisters.ResourceClaimLister
	classes resourcelisters.DeviceClassLister
	// classCounts caches AvailableDevicesByDeviceClass per pool.
	classCounts classCounts
	// publisher is nil when publishing ResourcePools is off.
	publisher *poolpublisher.Publisher
}

// Publishing is what the publisher reports of itself.
func (s *metricsSource) Publishing() (enabled, publishing bool, oldestUnwritten time.Duration) {
	if s.publisher == nil {
		return false, false, 0
	}
	oldestUnwritten, publishing = s.publisher.OldestUnwritten()
	return true, publishing, oldestUnwritten
}

// unknownClass is the series of pending pods whose claims name a device
// class that does not exist: the apiserver does not check the name, and a
// series per name a tenant wrote would grow without bound.
const unknownClass = "(unknown)"

// PendingPodsByDeviceClass counts the pods of this scheduler's DRAScope
// profiles that are not bound, not being deleted, and have a claim still to
// allocate, by each device class those claims ask for (a pod once per
// class; a prioritized list counts by its first choice). Every DeviceClass
// has a count, zero when no pod waits for it, so that an alert sees 0 rather
// than no series; classes that do not exist count as unknownClass, so the
// series are the classes an administrator created, and one more.
func (s *metricsSource) PendingPodsByDeviceClass() map[string]int {
	profiles := s.r.profileNames()
	counts := map[string]int{}
	if classes, err := s.classes.List(labels.Everything()); err == nil {
		for _, class := range classes {
			counts[class.Name] = 0
		}
	}
	exists := func(class string) bool { _, ok := counts[class]; return ok }
	for _, pod := range s.pods.unboundPods() {
		if !profiles.Has(pod.Spec.SchedulerName) {
			continue
		}
		classes := map[string]bool{}
		for i := range pod.Spec.ResourceClaims {
			name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
			if err != nil || name == nil {
				continue
			}
			claim, err := s.claims.ResourceClaims(pod.Namespace).Get(*name)
			if err != nil || claim.Status.Allocation != nil {
				continue
			}
			for _, class := range requestedClasses(claim) {
				if !exists(class) {
					class = unknownClass
				}
				classes[class] = true
			}
		}
		for class := range classes {
			counts[class]++
		}
	}
	return counts
}

// maxSchedulerSeries bounds the scheduler names drascope_pods_with_claims
// has series for: spec.schedulerName is whatever a pod's author wrote.
const maxSchedulerSeries = 16

// otherSchedulers is the series that sums the names past maxSchedulerSeries.
const otherSchedulers = "(others)"

// PodsWithClaimsByScheduler counts the pods that use ResourceClaims and
// have not finished, by spec.schedulerName: whoever allocates their
// devices. Every scheduler this process serves with DRAScope has a count,
// zero when none, so that a ratio never divides by no data. Past
// maxSchedulerSeries names, this process's and default-scheduler keep
// theirs, the busiest others theirs too, and the rest are summed as
// "(others)", so the same names keep their series from scrape to scrape.
func (s *metricsSource) PodsWithClaimsByScheduler() map[string]int {
	profiles := s.r.profileNames()
	counts := s.pods.counts()
	for profile := range profiles {
		if _, ok := counts[profile]; !ok {
			counts[profile] = 0
		}
	}
	return capSeries(counts, func(name string) bool { return profiles.Has(name) || name == v1.DefaultSchedulerName })
}

// capSeries keeps at most maxSchedulerSeries names of counts: those kept
// first, then the largest counts (ties by name); the rest are summed
// under otherSchedulers.
func capSeries(counts map[string]int, kept func(string) bool) map[string]int {
	if len(counts) <= maxSchedulerSeries {
		return counts
	}
	names := slices.Collect(maps.Keys(counts))
	slices.SortFunc(names, func(a, b string) int {
		if ka, kb := kept(a), kept(b); ka != kb {
			if ka {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	capped := map[string]int{}
	for i, name := range names {
		if i < maxSchedulerSeries-1 {
			capped[name] = counts[name]
		} else {
			capped[otherSchedulers] += counts[name]
		}
	}
	return capped
}

// requestedClasses are the device classes a claim's requests name, a
// prioritized list by its first subrequest.
func requestedClasses(claim *resourceapi.ResourceClaim) []string {
	var classes []string
	for _, request := range claim.Spec.Devices.Requests {
		switch {
		case request.Exactly != nil:
			classes = append(classes, request.Exactly.DeviceClassName)
		case len(request.FirstAvailable) > 0:
			classes = append(classes, request.FirstAvailable[0].DeviceClassName)
		}
	}
	return classes
}
