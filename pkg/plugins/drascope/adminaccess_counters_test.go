package drascope

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/dramanager"
)

// One node's partitionable GPU: "whole" uses all of it, "half-a" and
// "half-b" half each (pkg/adminaccess's counters_test.go runs upstream's
// allocator over the same).
func partitionableNode() []*resourceapi.ResourceSlice {
	spec := resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 2}
	partition := func(name, memory string) resourceapi.Device {
		return resourceapi.Device{
			Name: name,
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}},
			}},
		}
	}
	return []*resourceapi.ResourceSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "counters"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.example.com", Pool: spec, NodeName: ptr.To("node-1"),
			SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "devices"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.example.com", Pool: spec, NodeName: ptr.To("node-1"),
			Devices: []resourceapi.Device{partition("whole", "80Gi"), partition("half-a", "40Gi"), partition("half-b", "40Gi")},
		}},
	}
}

func claimFor(name, partition string, adminAccess bool) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpu", AdminAccess: ptr.To(adminAccess),
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["gpu.example.com"].partition == "` + partition + `"`,
				}}},
			},
		}}}},
	}
}

// The decorator changes the slices only while counters are ignored.
func TestSlicesWithoutCountersOnlyWhileIgnoring(t *testing.T) {
	listed := partitionableNode()
	manager := dramanager.New(innerParts{slices: staticSlices(listed)}, nil, nil, nil)
	lister := manager.ResourceSlices()
	if got, _ := lister.ListWithDeviceTaintRules(); got[1] != listed[1] {
		t.Error("slices changed while counters count")
	}
	restore := manager.IgnoreCounters()
	if got, _ := lister.ListWithDeviceTaintRules(); got[1] == listed[1] {
		t.Error("slices unchanged while counters are ignored")
	}
	restore()
	if got, _ := lister.ListWithDeviceTaintRules(); got[1] != listed[1] {
		t.Error("slices changed after counters count again")
	}
}

type staticSlices []*resourceapi.ResourceSlice

func (s staticSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) { return s, nil }

func TestAdminAccessUse(t *testing.T) {
	admin := func(name string) *resourceapi.ResourceClaim { return claimFor(name, "whole", true) }
	ordinary := func(name string) *resourceapi.ResourceClaim { return claimFor(name, "half-a", false) }
	allocated := func(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		return c
	}
	both := admin("both")
	both.Spec.Devices.Requests = append(both.Spec.Devices.Requests, ordinary("x").Spec.Devices.Requests[0])
	both.Spec.Devices.Requests[1].Name = "plain"
	withGPUs := func(p *v1.Pod) *v1.Pod {
		p.Spec.Containers = []v1.Container{{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{"example.com/gpu": resource.MustParse("1")}}}}
		return p
	}
	for name, tc := range map[string]struct {
		claims []*resourceapi.ResourceClaim
		pod    func(*v1.Pod) *v1.Pod
		want   adminaccess.Use
	}{
		"admin only":                          {claims: []*resourceapi.ResourceClaim{admin("a"), admin("b")}, want: adminaccess.Only},
		"an ordinary claim already allocated": {claims: []*resourceapi.ResourceClaim{admin("a"), allocated(ordinary("b"))}, want: adminaccess.Only},
		"an ordinary claim to allocate":       {claims: []*resourceapi.ResourceClaim{admin("a"), ordinary("b")}, want: adminaccess.Mixed},
		"admin and ordinary requests in one":  {claims: []*resourceapi.ResourceClaim{both}, want: adminaccess.Mixed},
		"extended resources DRA may serve":    {claims: []*resourceapi.ResourceClaim{admin("a")}, pod: withGPUs, want: adminaccess.Mixed},
		"no admin access":                     {claims: []*resourceapi.ResourceClaim{ordinary("a")}, want: adminaccess.None},
		"a template claim the pod's status says was not needed": {claims: []*resourceapi.ResourceClaim{admin("a")}, pod: func(p *v1.Pod) *v1.Pod {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: "optional", ResourceClaimTemplateName: ptr.To("t")})
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "optional"}}
			return p
		}, want: adminaccess.Only},
		"nothing to allocate": {claims: []*resourceapi.ResourceClaim{allocated(admin("a"))}, want: adminaccess.None},
	} {
		t.Run(name, func(t *testing.T) {
			byName := map[string]*resourceapi.ResourceClaim{}
			var names []string
			for _, c := range tc.claims {
				byName[c.Namespace+"/"+c.Name] = c
				names = append(names, c.Name)
			}
			pl := &DRAScope{claims: claimsByName{claims: byName}}
			pod := podWithClaims(names...)
			pod.Namespace = "monitoring"
			if tc.pod != nil {
				pod = tc.pod(pod)
			}
			claims := pl.claimsOf(pod)
			if got := adminaccess.UseOf(claims.toAllocate, claims.unknown, func() bool { return pl.requestsDRAExtendedResources(pod) }); got != tc.want {
				t.Errorf("adminaccess.UseOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMixedAdminAccessNote(t *testing.T) {
	state := framework.NewCycleState()
	if _, mixed := fromCycle[mixedAdminData](state, mixedAdminKey); mixed {
		t.Error("a cycle without a mixed pod reads as mixed")
	}
	state.Write(mixedAdminKey, mixedAdminData{})
	if _, mixed := fromCycle[mixedAdminData](state, mixedAdminKey); !mixed {
		t.Error("a mixed pod's cycle does not read as mixed")
	}
	if note := adminaccess.MixedNote(); !strings.Contains(note, adminaccess.UpstreamIssue) {
		t.Errorf("note %q does not name %s", note, adminaccess.UpstreamIssue)
	}
}
