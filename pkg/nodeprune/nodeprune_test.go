package nodeprune_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/nodeprune"
)

func nodeLocal(node, driver string, devices ...string) *resourceapi.ResourceSlice {
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To(node)}}
	for _, d := range devices {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: d})
	}
	return slice
}

func claimOf(classes ...string) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim"}}
	for _, class := range classes {
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: class,
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}})
	}
	return claim
}

func TestCandidates(t *testing.T) {
	nodes := []*v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}},
	}
	gpu := func(node, device string) structured.DeviceID { return structured.MakeDeviceID(gpuDriver, node, device) }
	// Every GPU in use but node-1's gpu-1; node-2's gpu-0 is withheld.
	slices := []*resourceapi.ResourceSlice{
		nodeLocal("node-0", gpuDriver, "gpu-0", "gpu-1"),
		nodeLocal("node-1", gpuDriver, "gpu-0", "gpu-1"),
		nodeLocal("node-2", gpuDriver, "gpu-0"),
	}
	inUse := sets.New(gpu("node-0", "gpu-0"), gpu("node-0", "gpu-1"), gpu("node-1", "gpu-0"), gpu("node-2", "gpu-0"))
	fabric := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "fabric"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: nicDriver, Pool: resourceapi.ResourcePool{Name: "fabric", Generation: 1, ResourceSliceCount: 1}, AllNodes: ptr.To(true),
		Devices: []resourceapi.Device{{Name: "link-0"}}}}

	for name, tc := range map[string]struct {
		claims   []*resourceapi.ResourceClaim
		slices   []*resourceapi.ResourceSlice
		withheld sets.Set[structured.DeviceID]
		want     []string // nil: every node
	}{
		"the node with a free GPU": {claims: []*resourceapi.ResourceClaim{claimOf("gpu")}, slices: slices, want: []string{"node-1"}},
		"and the node whose only free GPU is withheld, so that Filter says why": {
			claims: []*resourceapi.ResourceClaim{claimOf("gpu")}, slices: slices,
			withheld: sets.New(gpu("node-2", "gpu-0")), want: []string{"node-1", "node-2"}},
		"a free NIC everywhere does not keep nodes for a GPU": {
			claims: []*resourceapi.ResourceClaim{claimOf("gpu")}, slices: append([]*resourceapi.ResourceSlice{fabric}, slices...), want: []string{"node-1"}},
		"but does for a class that selects any driver": {
			claims: []*resourceapi.ResourceClaim{claimOf("anything")}, slices: append([]*resourceapi.ResourceSlice{fabric}, slices...)},
		"a GPU and a NIC: only where both are free": {
			claims: []*resourceapi.ResourceClaim{claimOf("gpu", "nic")}, slices: append(slices, nodeLocal("node-0", nicDriver, "nic-0")), want: []string{}},
		"a GPU and a NIC reachable from everywhere": {
			claims: []*resourceapi.ResourceClaim{claimOf("gpu", "nic")}, slices: append([]*resourceapi.ResourceSlice{fabric}, slices...), want: []string{"node-1"}},
		"admin access is never pruned for": {
			claims: []*resourceapi.ResourceClaim{func() *resourceapi.ResourceClaim {
				c := claimOf("gpu")
				c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
				return c
			}()}, slices: slices},
		"nor an allocated claim": {
			claims: []*resourceapi.ResourceClaim{func() *resourceapi.ResourceClaim {
				c := claimOf("gpu")
				c.Status.Allocation = &resourceapi.AllocationResult{}
				return c
			}()}, slices: slices},
		"nor a class that does not exist": {claims: []*resourceapi.ResourceClaim{claimOf("fpga")}, slices: slices},
	} {
		t.Run(name, func(t *testing.T) {
			view := nodeprune.View{Slices: tc.slices, InUse: inUse.Clone(), Withheld: tc.withheld}
			if tc.withheld == nil {
				view.Withheld = sets.New[structured.DeviceID]()
			}
			names, all := nodeprune.Candidates(tc.claims, testClasses.Get, view, nodes)
			switch {
			case tc.want == nil && !all:
				t.Errorf("candidates %v, want every node", sets.List(names))
			case tc.want != nil && all:
				t.Errorf("every node is a candidate, want %v", tc.want)
			case tc.want != nil && !names.Equal(sets.New(tc.want...)):
				t.Errorf("candidates %v, want %v", sets.List(names), tc.want)
			}
		})
	}
}

// The cache of device IDs keeps the slices in use and drops those no
// longer passed once they outnumber them: a cluster whose slices are
// replaced does not grow it.
func TestDeviceIDsDropSlicesNoLongerPassed(t *testing.T) {
	ids := &nodeprune.DeviceIDs{}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	claims := []*resourceapi.ResourceClaim{claimOf("gpu")}
	for generation := range 100 {
		slice := nodeLocal("node-1", gpuDriver)
		slice.Spec.Devices = []resourceapi.Device{{Name: fmt.Sprintf("gpu-%d", generation)}}
		nodeprune.Candidates(claims, testClasses.Get, nodeprune.View{Slices: []*resourceapi.ResourceSlice{slice}, IDs: ids}, []*v1.Node{node})
	}
	if n := ids.Len(); n > 20 {
		t.Errorf("%d slices cached after 100 updates of one slice, want a handful", n)
	}
}
