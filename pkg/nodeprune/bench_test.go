package nodeprune_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// BenchmarkCandidates: one pod's pruning on clusters of 10 GPUs per node,
// with all but 10 GPUs in use (full), half of them (half) or none (empty:
// every node qualifies, nothing can be pruned).
func BenchmarkCandidates(b *testing.B) {
	for _, nodes := range []int{500, 2000} {
		for _, fill := range []string{"full", "half", "empty"} {
			b.Run(fmt.Sprintf("%s_%dnodes", fill, nodes), func(b *testing.B) {
				var nodeList []*v1.Node
				// The plugin keeps one DeviceIDs per profile across pods.
				view := nodeprune.View{InUse: sets.New[structured.DeviceID](), Withheld: sets.New[structured.DeviceID](), IDs: &nodeprune.DeviceIDs{}}
				for n := range nodes {
					name := fmt.Sprintf("node-%d", n)
					nodeList = append(nodeList, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
					slice := nodeLocal(name, gpuDriver)
					for d := range 10 {
						device := fmt.Sprintf("gpu-%d", d)
						slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: device})
						busy := d < 5
						switch fill {
						case "full":
							busy = n >= 10 || d > 0 // one free GPU on each of 10 nodes
						case "empty":
							busy = false
						}
						if busy {
							view.InUse.Insert(structured.MakeDeviceID(gpuDriver, name, device))
						}
					}
					view.Slices = append(view.Slices, slice)
				}
				claims := []*resourceapi.ResourceClaim{claimOf("gpu")}
				b.ReportAllocs()
				for b.Loop() {
					nodeprune.Candidates(claims, testClasses.Get, view, nodeList)
				}
			})
		}
	}
}
