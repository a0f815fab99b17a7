package gangplan_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/gangplan"
)

// A planned member's listing: its planned devices, and every device in use
// (their counters must still count), nothing else free; a slice with
// nothing to leave out is handed on as it is, and the informer's objects
// are never changed.
func TestOnlyPlannedLeavesOutFreeDevicesOfOtherMembers(t *testing.T) {
	slice := func(name string, devices ...string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.example.com", Pool: resourceapi.ResourcePool{Name: name}, NodeName: ptr.To("node-0"),
		}}
		for _, d := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
		}
		return s
	}
	id := func(pool, device string) structured.DeviceID {
		return structured.MakeDeviceID("gpu.example.com", pool, device)
	}
	planned := slice("planned", "whole", "half-a", "half-b")
	shared := slice("shared", "s-0")
	shared.Spec.Devices[0].AllowMultipleAllocations = ptr.To(true)
	untouched := slice("untouched", "gpu-0")
	inUse := sets.New(id("planned", "half-b"), id("untouched", "gpu-0"))

	out := gangplan.OnlyPlanned([]*resourceapi.ResourceSlice{planned, shared, untouched}, sets.New(id("planned", "half-a")), inUse.Has)

	names := func(s *resourceapi.ResourceSlice) []string {
		var n []string
		for _, d := range s.Spec.Devices {
			n = append(n, d.Name)
		}
		return n
	}
	if got := names(out[0]); len(got) != 2 || got[0] != "half-a" || got[1] != "half-b" {
		t.Errorf("planned slice lists %v, want [half-a half-b] (the plan's, and the one in use)", got)
	}
	if len(planned.Spec.Devices) != 3 {
		t.Errorf("the informer's slice was changed: %v", names(planned))
	}
	if out[1] != shared || out[2] != untouched {
		t.Error("a slice with nothing to leave out was copied")
	}
}
