package devicechoice

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/slicememo"
)

// BenchmarkOrderPools is one scheduling cycle's ordering of a cluster's
// slices: 2000 node-local pools of 10 plain GPUs (nothing to order by, the
// nearly full benchmark's shape), or 50 pools of 4 partitionable GPUs with
// one partition in use on each (every pool reordered).
func BenchmarkOrderPools(b *testing.B) {
	plain := func() ([]*resourceapi.ResourceSlice, sets.Set[structured.DeviceID]) {
		var all []*resourceapi.ResourceSlice
		used := sets.New[structured.DeviceID]()
		for n := range 2000 {
			name := fmt.Sprintf("node-%d", n)
			slice := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: name, Generation: 1}, NodeName: &name}}
			for d := range 10 {
				slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", d)})
				if d < 9 {
					used.Insert(structured.MakeDeviceID(driver, name, fmt.Sprintf("gpu-%d", d)))
				}
			}
			all = append(all, slice)
		}
		return all, used
	}
	split := func() ([]*resourceapi.ResourceSlice, sets.Set[structured.DeviceID]) {
		var all []*resourceapi.ResourceSlice
		used := sets.New[structured.DeviceID]()
		for n := range 50 {
			name := fmt.Sprintf("node-%d", n)
			for _, slice := range partitionable(4) {
				slice.Name = name + "-" + slice.Name
				slice.Spec.Pool.Name = name
				all = append(all, slice)
			}
			used.Insert(structured.MakeDeviceID(driver, name, "gpu-1-partition-0"))
		}
		return all, used
	}
	for _, c := range []struct {
		name  string
		build func() ([]*resourceapi.ResourceSlice, sets.Set[structured.DeviceID])
		memo  bool
	}{{"plain-2000-pools", plain, false}, {"plain-2000-pools-memo", plain, true}, {"partitionable-50-pools", split, false}, {"partitionable-50-pools-memo", split, true}} {
		b.Run(c.name, func(b *testing.B) {
			all, used := c.build()
			opts := Options{InUse: used.Has, Want: 1}
			if c.memo {
				// The plugin keeps one per profile across cycles.
				opts.Orderable = &slicememo.Memo[bool]{}
			}
			b.ReportAllocs()
			for b.Loop() {
				OrderPools(all, opts)
			}
		})
	}
}
