package drascope

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// BenchmarkKeepPreemptible: a pod of priority 10 pruned to no candidate on
// 2000 nodes of 50 pods each (production nodes carry 50-100), all holding
// claims at priority 10: no node is added, so every node is looked at, as
// in each cycle of a steady state.
func BenchmarkKeepPreemptible(b *testing.B) {
	var nodes []fwk.NodeInfo
	for n := range 2000 {
		info := framework.NewNodeInfo()
		for p := range 50 {
			info.AddPod(podWith(fmt.Sprintf("p-%d-%d", n, p), 10, true))
		}
		info.SetNode(nodeInfo(fmt.Sprintf("node-%d", n)).Node())
		nodes = append(nodes, info)
	}
	pod := podWith("urgent", 10, true)
	keep := newKeepPreemptible()
	b.ReportAllocs()
	for b.Loop() {
		keep(sets.New[string](), pod, nodes)
	}
}
