package draruntime

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/drausage"
)

// AvailableDevicesByDeviceClass counts, for every DeviceClass, the devices
// the side cache has Available whose attributes and capacity the class's
// selectors accept. Only Available devices are evaluated, so on a nearly
// full cluster the cost is small. Together with PendingPodsByDeviceClass it
// says pods wait for a class that no pool has a free device of.
func (s *metricsSource) AvailableDevicesByDeviceClass() map[string]int {
	classes, err := s.classes.List(labels.Everything())
	counts := make(map[string]int, len(classes))
	if err != nil {
		return counts
	}
	for _, class := range classes {
		counts[class.Name] = 0
	}
	ctx := context.Background()
	for _, snap := range s.List() {
		if snap.Summary.Available == 0 {
			continue
		}
		available := make(map[string]bool, snap.Summary.Available)
		for _, d := range snap.Devices {
			if d.State == drausage.DeviceAvailable {
				available[d.Name] = true
			}
		}
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
	}
	return counts
}
