package drausage

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// BenchmarkComputePool is the cost of one pool recompute in the side cache:
// a pool of N devices (in slices of at most 128), half of them allocated to
// claims of one device each, plus one admin-access observer per 8 devices.
//
//	go test ./pkg/drausage -run '^$' -bench ComputePool -benchmem
func BenchmarkComputePool(b *testing.B) {
	for _, devices := range []int{16, 128, 1024} {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			id := PoolID{Driver: testDriver, Pool: "node-1"}
			sliceCount := (devices + 127) / 128
			var slices []*resourceapi.ResourceSlice
			for i := range sliceCount {
				var names []string
				for d := i * 128; d < min(devices, (i+1)*128); d++ {
					names = append(names, fmt.Sprintf("gpu-%d", d))
				}
				slices = append(slices, slice(fmt.Sprintf("s-%d", i), "node-1", 1, int64(sliceCount), devs(names...)...))
			}
			var claims []*resourceapi.ResourceClaim
			for d := 0; d < devices/2; d++ {
				claims = append(claims, allocatedClaim(fmt.Sprintf("c-%d", d), onDevice("node-1", fmt.Sprintf("gpu-%d", d))))
			}
			for d := 0; d < devices; d += 8 {
				claims = append(claims, allocatedClaim(fmt.Sprintf("admin-%d", d), admin(onDevice("node-1", fmt.Sprintf("gpu-%d", d)))))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p := ComputePool(id, slices, claims, Options{})
				if p.Summary.Allocated != devices/2 {
					b.Fatalf("allocated %d, want %d", p.Summary.Allocated, devices/2)
				}
			}
		})
	}
}
