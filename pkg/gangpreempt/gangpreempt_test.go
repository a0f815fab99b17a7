package gangpreempt

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

func gpu(name string) structured.DeviceID {
	return structured.MakeDeviceID("gpu.example.com", "node-0", name)
}

// The victims' devices are listed after the others, so that a member takes
// free devices first; slices without a victim's device are not copied.
func TestVictimsDevicesAreListedLast(t *testing.T) {
	slice := func(name string, devices ...string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.example.com", Pool: resourceapi.ResourcePool{Name: "node-0"}}}
		for _, d := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
		}
		return s
	}
	untouched := slice("free", "x", "y")
	listed := []*resourceapi.ResourceSlice{slice("mixed", "a", "b", "c", "d"), untouched}
	got := Found(Devices{Freed: sets.New(gpu("a"), gpu("c"))}).VictimsLast(listed)
	var order []string
	for _, d := range got[0].Spec.Devices {
		order = append(order, d.Name)
	}
	if want := []string{"b", "d", "a", "c"}; !slices.Equal(order, want) {
		t.Errorf("devices listed %v, want %v", order, want)
	}
	if listed[0].Spec.Devices[0].Name != "a" {
		t.Errorf("the informer's slice was changed")
	}
	if got[1] != untouched {
		t.Errorf("a slice without victims' devices was copied")
	}
}
