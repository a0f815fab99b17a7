package drausage

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

func claimWith(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}},
	}}
}

func result(device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: "gpu.example.com", Pool: "node-1", Device: device}
}

func TestForeachAllocatedDevice(t *testing.T) {
	shareA := types.UID("share-a")
	admin := result("gpu-0")
	admin.AdminAccess = ptr.To(true)
	notAdmin := result("gpu-1")
	notAdmin.AdminAccess = ptr.To(false)
	shared := result("gpu-2")
	shared.ShareID = &shareA
	sharedWithCapacity := result("gpu-3")
	sharedWithCapacity.ShareID = &shareA
	sharedWithCapacity.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("4Gi")}
	adminShared := sharedWithCapacity
	adminShared.Device = "gpu-4"
	adminShared.AdminAccess = ptr.To(true)

	type visit struct {
		Kind   string
		Device string
	}
	tests := map[string]struct {
		claim *resourceapi.ResourceClaim
		want  []visit
	}{
		"nil claim":         {claim: nil},
		"unallocated claim": {claim: &resourceapi.ResourceClaim{}},
		"dedicated device, adminAccess unset": {
			claim: claimWith(result("gpu-9")),
			want:  []visit{{"dedicated", "gpu.example.com/node-1/gpu-9"}},
		},
		"admin access is skipped, adminAccess false is not": {
			claim: claimWith(admin, notAdmin),
			want:  []visit{{"dedicated", "gpu.example.com/node-1/gpu-1"}},
		},
		"share without consumed capacity": {
			claim: claimWith(shared),
			want:  []visit{{"shared", "gpu.example.com/node-1/gpu-2/share-a"}},
		},
		"share with consumed capacity reports both": {
			claim: claimWith(sharedWithCapacity),
			want: []visit{
				{"shared", "gpu.example.com/node-1/gpu-3/share-a"},
				{"capacity", "gpu.example.com/node-1/gpu-3 memory=4Gi"},
			},
		},
		"admin access share is skipped too": {
			claim: claimWith(adminShared, result("gpu-5")),
			want:  []visit{{"dedicated", "gpu.example.com/node-1/gpu-5"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []visit
			ForeachAllocatedDevice(tc.claim, DeviceVisitor{
				Dedicated: func(id structured.DeviceID) { got = append(got, visit{"dedicated", id.String()}) },
				Shared:    func(id structured.SharedDeviceID) { got = append(got, visit{"shared", id.String()}) },
				ConsumedCapacity: func(c structured.DeviceConsumedCapacity) {
					q := c.ConsumedCapacity["memory"]
					got = append(got, visit{"capacity", c.DeviceID.String() + " memory=" + q.String()})
				},
			})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("visits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestForeachAllocatedDeviceNilCallbacks(t *testing.T) {
	shareA := types.UID("share-a")
	shared := result("gpu-2")
	shared.ShareID = &shareA
	shared.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("1Gi")}
	var dedicated []string
	// Only Dedicated is set; the share must be skipped without a panic.
	ForeachAllocatedDevice(claimWith(result("gpu-1"), shared), DeviceVisitor{
		Dedicated: func(id structured.DeviceID) { dedicated = append(dedicated, id.Device.String()) },
	})
	if diff := cmp.Diff([]string{"gpu-1"}, dedicated); diff != "" {
		t.Errorf("dedicated (-want +got):\n%s", diff)
	}
}
