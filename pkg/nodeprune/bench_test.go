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
// every node qualifies, nothing can be pruned); walk is Candidates, index
// is Index.Candidates when its in-use set is the cycle's.
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
				b.Run("walk", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						nodeprune.Candidates(claims, testClasses.Get, view, nodeList)
					}
				})
				b.Run("index", func(b *testing.B) {
					// The index as the scheduler feeds it: one claim
					// per device in use.
					var outcome nodeprune.Outcome
					index := nodeprune.NewIndex(nodeprune.IndexOptions{Observe: func(o nodeprune.Outcome) { outcome = o }})
					for id := range view.InUse {
						index.SetClaim(&resourceapi.ResourceClaim{
							ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: id.Pool.String() + "-" + id.Device.String(), ResourceVersion: "1"},
							Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
								Results: []resourceapi.DeviceRequestAllocationResult{{Request: "req", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()}}}}},
						})
					}
					byName := map[string]bool{}
					for _, n := range nodeList {
						byName[n.Name] = true
					}
					nodes := nodeprune.Nodes{Count: len(nodeList), Has: func(name string) bool { return byName[name] }, List: func() []*v1.Node { return nodeList }}
					b.ReportAllocs()
					for b.Loop() {
						index.Candidates(claims, testClasses.Get, view, nodes)
					}
					if outcome == nodeprune.Fallback {
						b.Fatal("the index fell back: the benchmark measures the walk")
					}
				})
			})
		}
	}
}
