package drascope

import (
	"context"
	"testing"

	"github.com/drascope/drascope/pkg/devicescore"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/config"
)

func TestRequestedDevices(t *testing.T) {
	exact := func(name string, count int64, admin bool, mode resourceapi.DeviceAllocationMode) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "gpu", AllocationMode: mode, Count: count, AdminAccess: ptr.To(admin)}}
	}
	claimWith := func(name string, allocated bool, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		c := claim(name, nil, allocated)
		c.Spec.Devices.Requests = requests
		return c
	}
	prioritized := resourceapi.DeviceRequest{Name: "p", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "small", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}
	claims := claimsByName{claims: map[string]*resourceapi.ResourceClaim{
		"team/two":       claimWith("two", false, exact("a", 2, false, resourceapi.DeviceAllocationModeExactCount)),
		"team/monitor":   claimWith("monitor", false, exact("m", 1, true, resourceapi.DeviceAllocationModeExactCount)),
		"team/all":       claimWith("all", false, exact("x", 0, false, resourceapi.DeviceAllocationModeAll)),
		"team/listed":    claimWith("listed", false, prioritized),
		"team/allocated": claimWith("allocated", true, exact("a", 3, false, resourceapi.DeviceAllocationModeExactCount)),
	}}
	pl := &DRAScope{claims: claims}
	for _, tc := range []struct {
		claims []string
		want   int
		ok     bool
	}{
		{[]string{"two", "monitor"}, 2, true},
		{[]string{"all"}, 0, false},
		{[]string{"monitor"}, 0, false},
		{[]string{"listed"}, 4, true},
		{[]string{"allocated"}, 0, false},
		{[]string{"missing"}, 0, false},
	} {
		got, ok := devicescore.Requested(pl.claimsOf(podWithClaims(tc.claims...)).toAllocate)
		if got != tc.want || ok != tc.ok {
			t.Errorf("claims %v: %d, %v; want %d, %v", tc.claims, got, ok, tc.want, tc.ok)
		}
	}
}

// With the strategy None, PreScore gathers nothing, and NormalizeScore is
// upstream's.
func TestScoringNoneAddsNothing(t *testing.T) {
	pl := &DRAScope{scoring: config.ScoringNone, claims: claimsByName{claims: map[string]*resourceapi.ResourceClaim{
		"team/two": claim("two", nil, false),
	}}}
	state := framework.NewCycleState()
	if status := pl.PreScore(context.Background(), state, podWithClaims("two"), nil); !status.IsSuccess() {
		t.Fatal(status)
	}
	if _, err := state.Read(scoringKey); err == nil {
		t.Error("PreScore wrote scoring state under the strategy None")
	}
}
