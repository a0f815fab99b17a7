package draruntime

import (
	"context"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
)

// classCounts remembers, per pool, how many of its Available devices each
// DeviceClass accepts, for the snapshot version and the classes it was
// computed for: a scrape evaluates selectors only for pools that changed
// since the last one. Concurrent scrapes wait for each other.
type classCounts struct {
	mu    sync.Mutex
	pools map[drausage.PoolID]poolClassCounts
}

type poolClassCounts struct {
	version uint64
	classes string
	counts  map[string]int
}

// AvailableDevicesByDeviceClass counts, for every DeviceClass, the devices
// the side cache has Available whose attributes and capacity the class's
// selectors accept, in pools the allocator uses (complete and valid).
// Together with PendingPodsByDeviceClass it says pods wait for a class that
// no pool has a free device of.
func (s *metricsSource) AvailableDevicesByDeviceClass() map[string]int {
	classes, err := s.classes.List(labels.Everything())
	counts := make(map[string]int, len(classes))
	if err != nil {
		return counts
	}
	var key strings.Builder
	for _, class := range classes {
		counts[class.Name] = 0
		key.WriteString(class.Name + "@" + class.ResourceVersion + ";")
	}
	classesKey := key.String()

	s.classCounts.mu.Lock()
	defer s.classCounts.mu.Unlock()
	seen := make(map[drausage.PoolID]poolClassCounts, len(s.classCounts.pools))
	for _, snap := range s.List() {
		if snap.Summary.Available == 0 || !snap.Complete() || !slicesValid(snap) {
			continue
		}
		cached, ok := s.classCounts.pools[snap.PoolID]
		if !ok || cached.version != snap.Version || cached.classes != classesKey {
			cached = poolClassCounts{version: snap.Version, classes: classesKey, counts: s.countPool(snap, classes)}
		}
		seen[snap.PoolID] = cached
		for class, n := range cached.counts {
			counts[class] += n
		}
	}
	s.classCounts.pools = seen
	return counts
}

// countPool evaluates the classes on the pool's Available devices, as its
// slices of the snapshot's generation publish them.
func (s *metricsSource) countPool(snap *poolcache.Snapshot, classes []*resourceapi.DeviceClass) map[string]int {
	available := make(map[string]bool, snap.Summary.Available)
	for _, d := range snap.Devices {
		if d.State == drausage.DeviceAvailable {
			available[d.Name] = true
		}
	}
	counts := map[string]int{}
	ctx := context.Background()
	for _, slice := range s.Slices(snap.PoolID) {
		if slice.Spec.Pool.Generation != snap.Generation {
			continue
		}
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			if !available[device.Name] {
				continue
			}
			for _, class := range classes {
				if deviceclass.Accepts(ctx, class, slice.Spec.Driver, device) {
					counts[class.Name]++
				}
			}
		}
	}
	return counts
}

// slicesValid reports whether the pool's slices passed validation: the
// allocator does not use a pool that failed it. A conflict makes a pool
// not Valid too, but the allocator still uses it.
func slicesValid(snap *poolcache.Snapshot) bool {
	for _, e := range snap.ValidationErrors {
		if e.Kind != drausage.MissingSlices {
			return false
		}
	}
	return true
}
