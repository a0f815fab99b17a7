package drascope

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/devicechoice"
	"github.com/drascope/drascope/pkg/dramanager"
)

// deviceChoice BestFit through upstream's real PreFilter, Filter and
// Reserve: on a node whose GPUs sit under two PCIe roots, listed
// interleaved, with one GPU of root a in use, a one-GPU pod gets root a's
// last free GPU (the group that fits it most tightly), where FirstFit, the
// driver's order, gives it the first free GPU of root b.
func TestBestFitChoosesThroughUpstreamsAllocator(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bestFit bool
		want    string
	}{
		{"FirstFit", false, "gpu-1"},
		{"BestFit", true, "gpu-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			slice := captureSlice("node-1", 4)
			for i, root := range []string{"pci-a", "pci-b", "pci-b", "pci-a"} {
				slice.Spec.Devices[i].Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(root)}}
			}
			mine := captureClaim("mine")
			pod := capturePod(mine)
			objects := []runtime.Object{
				&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: captureDriver}},
				slice, mine, pod, captureClaim("held", "node-1", "gpu-0"),
			}
			upstream, manager, _ := upstreamThroughDecorator(ctx, t, objects, feature.Features{EnableDynamicResourceAllocation: true},
				func(m *dramanager.Manager) {
					if tc.bestFit {
						m.OrderBestFit()
					}
				})
			manager.Want(devicechoice.Wanted([]*resourceapi.ResourceClaim{mine}))
			node := framework.NewNodeInfo()
			node.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
			state := framework.NewCycleState()
			manager.BeginCapture()
			listed := manager.ListForAllocator()
			_, status := upstream.PreFilter(ctx, state, pod, []fwk.NodeInfo{node})
			listed()
			if !status.IsSuccess() {
				t.Fatalf("upstream's PreFilter: %v", status)
			}
			if status := upstream.Filter(ctx, state, pod, node); !status.IsSuccess() {
				t.Fatalf("upstream's Filter: %v", status)
			}
			if status := upstream.Reserve(ctx, state, pod, "node-1"); !status.IsSuccess() {
				t.Fatalf("upstream's Reserve: %v", status)
			}
			allocation := manager.ResourceClaims().GetPendingAllocation(mine.UID)
			if allocation == nil || len(allocation.Devices.Results) != 1 {
				t.Fatalf("pending allocation %+v, want one device", allocation)
			}
			if got := allocation.Devices.Results[0].Device; got != tc.want {
				t.Errorf("allocated %s, want %s", got, tc.want)
			}
		})
	}
}
