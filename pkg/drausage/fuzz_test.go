package drausage

import (
	"fmt"
	"math"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// byteSource turns fuzz input into small choices; it returns zeros when empty.
type byteSource struct{ data []byte }

func (b *byteSource) next(n int) int {
	if len(b.data) == 0 || n <= 0 {
		return 0
	}
	v := int(b.data[0]) % n
	b.data = b.data[1:]
	return v
}

// sliceCounts are the resourceSliceCounts fuzzInput chooses from: small
// ones, and counts the API accepts that no int32 holds.
var sliceCounts = []int64{0, 1, 2, 3, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt64}

// fuzzInput builds slices and claims from data. Names come from tiny
// alphabets so that duplicates, conflicts and shared counters are common.
func fuzzInput(data []byte) ([]*resourceapi.ResourceSlice, []*resourceapi.ResourceClaim, Options) {
	b := &byteSource{data: data}
	var slices []*resourceapi.ResourceSlice
	for i := range b.next(6) {
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("slice-%d", i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: fmt.Sprintf("driver-%d", b.next(2)),
				Pool:   resourceapi.ResourcePool{Name: fmt.Sprintf("pool-%d", b.next(3)), Generation: int64(b.next(3)), ResourceSliceCount: sliceCounts[b.next(len(sliceCounts))]},
			},
		}
		if b.next(2) == 0 {
			s.Spec.NodeName = ptr.To(fmt.Sprintf("node-%d", b.next(2)))
		}
		if b.next(3) == 0 {
			s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "set", Counters: map[string]resourceapi.Counter{"c": {Value: *resource.NewQuantity(int64(b.next(5)), resource.DecimalSI)}}}}
		}
		for range b.next(5) {
			d := resourceapi.Device{Name: fmt.Sprintf("dev-%d", b.next(4))}
			if b.next(3) == 0 {
				d.AllowMultipleAllocations = ptr.To(true)
				d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"mem": {Value: *resource.NewQuantity(int64(b.next(4)), resource.DecimalSI)}}
			}
			if b.next(4) == 0 {
				d.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: []resourceapi.DeviceTaintEffect{resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone}[b.next(3)]}}
			}
			if b.next(3) == 0 {
				d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "set", Counters: map[string]resourceapi.Counter{"c": {Value: *resource.NewQuantity(int64(b.next(3)), resource.DecimalSI)}}}}
			}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
		slices = append(slices, s)
	}
	var claims []*resourceapi.ResourceClaim
	for i := range b.next(8) {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("claim-%d", i), UID: types.UID(fmt.Sprint(i))}}
		if b.next(5) > 0 {
			c.Status.Allocation = &resourceapi.AllocationResult{}
			for range b.next(3) + 1 {
				r := resourceapi.DeviceRequestAllocationResult{
					Request: "r", Driver: fmt.Sprintf("driver-%d", b.next(2)),
					Pool: fmt.Sprintf("pool-%d", b.next(3)), Device: fmt.Sprintf("dev-%d", b.next(4)),
				}
				switch b.next(4) {
				case 0:
					r.AdminAccess = ptr.To(true)
				case 1:
					r.ShareID = ptr.To(types.UID(fmt.Sprint(b.next(4))))
					r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"mem": *resource.NewQuantity(int64(b.next(4)), resource.DecimalSI)}
				}
				c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
			}
		}
		claims = append(claims, c)
	}
	var opts Options
	if b.next(3) == 0 {
		opts.DeviceTaintRules = []*resourceapi.DeviceTaintRule{{Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Device: ptr.To(fmt.Sprintf("dev-%d", b.next(4)))},
			Taint:          resourceapi.DeviceTaint{Key: "rule", Effect: resourceapi.DeviceTaintEffectNoSchedule},
		}}}
	}
	return slices, claims, opts
}

// FuzzComputePoolUsage checks, for arbitrary slices and claims, that nothing
// panics and the counts add up:
//
//	go test ./pkg/drausage -run '^$' -fuzz FuzzComputePoolUsage -fuzztime 1m
func FuzzComputePoolUsage(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 0, 1, 1, 0, 0, 0, 4, 1, 2, 3, 0, 5, 1, 1, 1, 0, 2})
	f.Add([]byte("a pool with some devices and several claims racing for them"))
	f.Fuzz(func(t *testing.T, data []byte) {
		slices, claims, opts := fuzzInput(data)
		// Independently of the counting code: which devices some claim holds
		// without admin access.
		held := map[PoolID]map[string]bool{}
		for _, c := range claims {
			if c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if ptr.Deref(r.AdminAccess, false) {
					continue
				}
				id := PoolID{Driver: r.Driver, Pool: r.Pool}
				if held[id] == nil {
					held[id] = map[string]bool{}
				}
				held[id][r.Device] = true
			}
		}
		for _, p := range ComputePoolUsage(slices, claims, opts) {
			s := p.Summary
			if s.Total != len(p.Devices) {
				t.Errorf("pool %s: total %d, but %d devices", p.PoolID, s.Total, len(p.Devices))
			}
			if s.Allocated+s.Unavailable+s.Available != s.Total || s.Available < 0 || s.Unavailable < 0 {
				t.Errorf("pool %s: counts do not add up: %+v", p.PoolID, s)
			}
			if s.PartiallyAllocated > s.Allocated {
				t.Errorf("pool %s: more partially allocated than allocated: %+v", p.PoolID, s)
			}
			if p.ExpectedSlices < 0 || p.ExpectedSlices > MaxSliceCount {
				t.Errorf("pool %s: expected slices %d, observed %d: a ResourcePool's int32 cannot hold them", p.PoolID, p.ExpectedSlices, p.ObservedSlices)
			}
			if p.ExpectedSlices == MaxSliceCount && p.Valid() && tooManySlices(slices, &p) {
				t.Errorf("pool %s: a resourceSliceCount past %d at generation %d, and the pool is Valid", p.PoolID, MaxSliceCount, p.Generation)
			}
			if len(p.ValidationErrors) > MaxValidationErrors || p.TruncatedErrorCount < 0 {
				t.Errorf("pool %s: %d errors kept, %d truncated", p.PoolID, len(p.ValidationErrors), p.TruncatedErrorCount)
			}
			keys := map[string]bool{}
			for _, c := range p.Conflicts {
				if keys[c.Key()] || len(c.Claims) == 0 || c.Message == "" {
					t.Errorf("pool %s: conflict %+v repeated, or without claims or message", p.PoolID, c)
				}
				keys[c.Key()] = true
			}
			seen := map[string]bool{}
			for _, d := range p.Devices {
				if seen[d.Name] {
					t.Errorf("pool %s: device %s listed twice", p.PoolID, d.Name)
				}
				seen[d.Name] = true
				isAllocated := d.State == DeviceAllocated || d.State == DevicePartiallyAllocated
				if isAllocated != held[p.PoolID][d.Name] {
					t.Errorf("pool %s: device %s is %s, but held by a claim: %v", p.PoolID, d.Name, d.State, held[p.PoolID][d.Name])
				}
				if (d.State == DeviceUnavailable) != (d.Reason != "") {
					t.Errorf("pool %s: device %s state %s with reason %q", p.PoolID, d.Name, d.State, d.Reason)
				}
			}
		}
	})
}

// tooManySlices reports whether a slice of the pool's generation gives a
// resourceSliceCount past MaxSliceCount.
func tooManySlices(slices []*resourceapi.ResourceSlice, p *PoolUsage) bool {
	for _, s := range slices {
		if s.Spec.Driver == p.Driver && s.Spec.Pool.Name == p.Pool && s.Spec.Pool.Generation == p.Generation && s.Spec.Pool.ResourceSliceCount > MaxSliceCount {
			return true
		}
	}
	return false
}
