package poolcache

import (
	"fmt"
	"strconv"
	"testing"
)

// BenchmarkClaimEvent measures one claim event through the side cache, the
// informer handler's update and the recompute of the pool it touches, with
// the cache holding more and more pools of 11 devices and 10 claims each
// (KEP-5677's GA scale is 1000+ pools, 10000+ claims). The cost should not
// grow with the number of pools:
//
//	go test ./pkg/poolcache -run '^$' -bench ClaimEvent -benchmem
func BenchmarkClaimEvent(b *testing.B) {
	const devicesPerPool, claimsPerPool = 11, 10
	for _, pools := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("pools=%d/claims=%d", pools, pools*claimsPerPool), func(b *testing.B) {
			c := New(Options{})
			devices := make([]string, devicesPerPool)
			for d := range devices {
				devices[d] = fmt.Sprintf("gpu-%d", d)
			}
			for p := range pools {
				name := fmt.Sprintf("pool-%d", p)
				c.SetSlice(slice(name, name, devices...))
				for k := range claimsPerPool {
					c.SetClaim(claim(fmt.Sprintf("claim-%d-%d", p, k), "1", pool(name)))
				}
			}
			c.Sync()
			// The event: one claim of one pool gets a new version, as when
			// its status is written.
			target := pool(fmt.Sprintf("pool-%d", pools/2))
			name := fmt.Sprintf("claim-%d-0", pools/2)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				c.SetClaim(claim(name, strconv.Itoa(i+2), target))
				if changed := c.Sync(); len(changed) > 1 {
					b.Fatalf("one claim event recomputed %d pools", len(changed))
				}
			}
		})
	}
}
