package integration

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drascope/drascope/pkg/drausage"
)

// Device-aware scoring (scoring.strategy), each strategy in a scheduler of
// its own with percentageOfNodesToScore: 100, on three nodes of 4 GPUs.
// MostAllocated puts consecutive 1-GPU pods on one node until it is full,
// and still lets a prioritized list's first subrequest win; LeastAllocated
// puts them on different nodes.
func TestScoringStrategies(t *testing.T) {
	restartScheduler(t, func() {
		t.Run("MostAllocated", func(t *testing.T) {
			const name = "drascope-pack"
			b := startScoringScheduler(t, name, "MostAllocated")
			defer b.stop()
			s := newScenario(t, nil)
			nodes := s.gpuNodes(3, 4)
			placed := s.placeOneByOne(name, "pod", 7)
			if len(sets.New(placed[:4]...)) != 1 || len(sets.New(placed[4:]...)) != 1 || placed[4] == placed[0] {
				t.Errorf("seven 1-GPU pods went to %v, want four on one node, then three on another", placed)
			}

			// A prioritized list: 2 GPUs, else 1. Packing alone would pick
			// the node with 1 GPU left, where only 1 fits (full after it);
			// the list's first choice fits only on the empty node (half
			// full after it), and wins.
			empty := sets.New(nodes...).Delete(placed...).UnsortedList()
			s.addClaimFor("listed", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "two", DeviceClassName: deviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
				{Name: "one", DeviceClassName: deviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}})
			s.addPod("listed", name, fromClaim("listed"))
			pod := s.waitForPodScheduled("listed")
			claim := s.podClaim(pod)
			if len(empty) != 1 || pod.Spec.NodeName != empty[0] || len(claim.Status.Allocation.Devices.Results) != 2 {
				t.Errorf("the prioritized-list pod went to %s with %d device(s), want the empty node %v with 2", pod.Spec.NodeName, len(claim.Status.Allocation.Devices.Results), empty)
			}
			t.Logf("MostAllocated, seven 1-GPU pods then a 2-GPU one (# allocated, . free):\n%s", s.deviceGrid(nodes))

			// Partitions go to the partitionable GPU already split: its
			// other half, rather than half of a whole one.
			split, whole := s.addNode("split", 0), s.addNode("whole", 0)
			splitPool := s.addPartitionablePool("split", &split)
			s.addPartitionablePool("whole", &whole)
			s.addClaim("first-half", false)
			s.allocateDirectly("first-half", splitPool, "half-a")
			s.addClaimFor("half", resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: deviceClassName,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf("device.attributes[%q].?partition.orValue(\"\").startsWith(\"half-\")", driverName),
				}}},
			}})
			s.addPod("half", name, fromClaim("half"))
			if got := s.waitForPodScheduled("half").Spec.NodeName; got != split {
				t.Errorf("a pod asking for half a GPU went to %s, want %s, whose GPU is already split", got, split)
			}
		})
		t.Run("LeastAllocated", func(t *testing.T) {
			const name = "drascope-spread"
			b := startScoringScheduler(t, name, "LeastAllocated")
			defer b.stop()
			s := newScenario(t, nil)
			nodes := s.gpuNodes(3, 4)
			if placed := s.placeOneByOne(name, "pod", 3); len(sets.New(placed...)) != 3 {
				t.Errorf("three 1-GPU pods went to %v, want three nodes", placed)
			}
			t.Logf("LeastAllocated, three 1-GPU pods (# allocated, . free):\n%s", s.deviceGrid(nodes))
		})
	})
}

// startScoringScheduler runs bin/drascope-scheduler with the shipped config
// under its own scheduler name, scoring.strategy set, every feasible node
// scored, and no ResourcePool publishing.
func startScoringScheduler(t *testing.T, name, strategy string) *schedulerBinary {
	t.Helper()
	config, err := writeTempConfig(name, shippedConfigWith(t,
		"kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 100\n",
		"schedulerName: "+schedulerName, "schedulerName: "+name,
		"strategy: MostAllocated", "strategy: "+strategy,
		"      adminAccess:", "      poolStatus:\n        publishResourcePools: false\n      adminAccess:",
	), env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := runSchedulerBinary(t, name, config, "--leader-elect=false")
	return b
}

// placeOneByOne creates n pods of one GPU each for scheduler, each after the
// previous one is bound, and returns the node of each.
func (s *scenario) placeOneByOne(scheduler, prefix string, n int) []string {
	s.t.Helper()
	var nodes []string
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		s.addPod(name, scheduler, fromTemplate("gpu"))
		nodes = append(nodes, s.waitForPodScheduled(name).Spec.NodeName)
	}
	return nodes
}

// deviceGrid draws each node's devices, as the apiserver's claims hold
// them: a line per node, # for an allocated device, . for a free one.
func (s *scenario) deviceGrid(nodes []string) string {
	s.t.Helper()
	byPool, err := usageFromAPI(s.ctx, s.namespace)
	if err != nil {
		s.t.Fatal(err)
	}
	var b strings.Builder
	for i, node := range nodes {
		fmt.Fprintf(&b, "node %d  ", i)
		for _, d := range byPool[node].Devices {
			if d.State == drausage.DeviceAvailable {
				b.WriteString(".")
			} else {
				b.WriteString("#")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
