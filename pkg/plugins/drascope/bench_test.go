package drascope

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
)

// BenchmarkKeepPreemptible: a pod of priority 10 pruned to no candidate on
// 2000 nodes of 50 pods each (production nodes carry 50-100), all holding
// claims at priority 10: no node is added, as in each cycle of a steady
// state.
func BenchmarkKeepPreemptible(b *testing.B) {
	holders := &claimHolders{}
	nodes := sets.New[string]()
	for n := range 2000 {
		node := fmt.Sprintf("node-%d", n)
		nodes.Insert(node)
		for p := range 50 {
			pod := podWith(fmt.Sprintf("p-%d-%d", n, p), 10, true)
			pod.Spec.NodeName = node
			holders.set(pod)
		}
	}
	pod := podWith("urgent", 10, true)
	b.ReportAllocs()
	for b.Loop() {
		holders.keepPreemptible(sets.New[string](), pod, nodes.Has)
	}
}
