package allocated

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

func TestEachCountsAsUpstreamCountsInUse(t *testing.T) {
	share := types.UID("share-1")
	allocation := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "plain", Driver: "d", Pool: "p", Device: "gpu-0"},
		{Request: "monitor", Driver: "d", Pool: "p", Device: "gpu-1", AdminAccess: ptr.To(true)},
		{Request: "shared", Driver: "d", Pool: "p", Device: "nic-0", ShareID: &share,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("10G")}},
		{Request: "shared-no-capacity", Driver: "d", Pool: "p", Device: "nic-1", ShareID: &share},
		{Request: "not-admin", Driver: "d", Pool: "p", Device: "gpu-2", AdminAccess: ptr.To(false)},
	}}}
	type seen struct {
		Whole    []string
		Shares   []string
		Consumed []string
	}
	each := func(shares bool) seen {
		var got seen
		Each(allocation, shares, Visitor{
			Whole: func(r *resourceapi.DeviceRequestAllocationResult, id structured.DeviceID) {
				got.Whole = append(got.Whole, r.Request+"="+id.String())
			},
			Share: func(r *resourceapi.DeviceRequestAllocationResult, id structured.SharedDeviceID, consumed *structured.DeviceConsumedCapacity) {
				got.Shares = append(got.Shares, r.Request+"="+id.String())
				if consumed != nil {
					q := consumed.ConsumedCapacity["bandwidth"]
					got.Consumed = append(got.Consumed, consumed.DeviceID.String()+":"+q.String())
				}
			},
		})
		return got
	}
	withShares := seen{
		Whole:    []string{"plain=d/p/gpu-0", "not-admin=d/p/gpu-2"},
		Shares:   []string{"shared=d/p/nic-0/share-1", "shared-no-capacity=d/p/nic-1/share-1"},
		Consumed: []string{"d/p/nic-0:10G"},
	}
	if diff := cmp.Diff(withShares, each(true)); diff != "" {
		t.Errorf("shares tracked (-want +got):\n%s", diff)
	}
	// Without DRAConsumableCapacity upstream counts a share as its whole
	// device: it cannot tell shares apart.
	wholeOnly := seen{Whole: []string{"plain=d/p/gpu-0", "shared=d/p/nic-0", "shared-no-capacity=d/p/nic-1", "not-admin=d/p/gpu-2"}}
	if diff := cmp.Diff(wholeOnly, each(false)); diff != "" {
		t.Errorf("shares not tracked (-want +got):\n%s", diff)
	}
	Each(nil, true, Visitor{Whole: func(*resourceapi.DeviceRequestAllocationResult, structured.DeviceID) {
		t.Error("a nil allocation holds a device")
	}})
}

func TestHoldsAny(t *testing.T) {
	admin := resourceapi.DeviceRequestAllocationResult{Driver: "d", Pool: "p", Device: "gpu-0", AdminAccess: ptr.To(true)}
	plain := resourceapi.DeviceRequestAllocationResult{Driver: "d", Pool: "p", Device: "gpu-1"}
	for name, tc := range map[string]struct {
		allocation *resourceapi.AllocationResult
		want       bool
	}{
		"nil":        {nil, false},
		"admin only": {&resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{admin}}}, false},
		"admin and a device": {&resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{admin, plain}}}, true},
	} {
		if got := HoldsAny(tc.allocation); got != tc.want {
			t.Errorf("%s: HoldsAny = %v, want %v", name, got, tc.want)
		}
	}
}
