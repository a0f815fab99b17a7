package nodeprune

import (
	resourceapi "k8s.io/api/resource/v1"
	draapi "k8s.io/dynamic-resource-allocation/api"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/slicememo"
)

// DeviceIDs caches the allocator's interned IDs of each slice's devices, so
// that pruning does not intern three names per device for every pod:
// interning is a hash-map lookup each, and on a full cluster pruning passes
// every device of every slice. The zero value is ready.
type DeviceIDs = slicememo.Memo[[]structured.DeviceID]

// makeIDs interns the slice's driver and pool once, and each device name.
func makeIDs(slice *resourceapi.ResourceSlice) []structured.DeviceID {
	driver, pool := draapi.MakeUniqueString(slice.Spec.Driver), draapi.MakeUniqueString(slice.Spec.Pool.Name)
	ids := make([]structured.DeviceID, len(slice.Spec.Devices))
	for i := range slice.Spec.Devices {
		ids[i] = structured.DeviceID{Driver: driver, Pool: pool, Device: draapi.MakeUniqueString(slice.Spec.Devices[i].Name)}
	}
	return ids
}
