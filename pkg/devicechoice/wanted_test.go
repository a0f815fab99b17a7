package devicechoice

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestWanted(t *testing.T) {
	exact := func(count int64, mode resourceapi.DeviceAllocationMode) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: mode, Count: count}}
	}
	firstAvailable := resourceapi.DeviceRequest{Name: "r", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "small", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}
	claim := func(requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}}}
	}
	claims := []*resourceapi.ResourceClaim{
		claim(exact(2, resourceapi.DeviceAllocationModeExactCount), exact(0, resourceapi.DeviceAllocationModeAll)),
		claim(firstAvailable),
	}
	if got := Wanted(claims); got != 6 {
		t.Errorf("Wanted = %d, want 6 (2 + all of a class counting nothing + the first alternative's 4)", got)
	}
}
