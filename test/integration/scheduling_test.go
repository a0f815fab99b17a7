package integration

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A pod whose claim comes from a template lands on the node that has a
// matching device, and its generated claim is allocated from that node's pool.
func TestClaimTemplatePodLands(t *testing.T) {
	s := newScenario(t, nil)
	s.addNode("no-gpus", 0)
	withGPUs := s.addNode("gpus", 2)
	s.addClaimTemplate("gpu", false)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))

	pod := s.waitForPodScheduled("trainer")
	if pod.Spec.NodeName != withGPUs {
		t.Errorf("pod landed on %s, want %s (the only node with %s devices)", pod.Spec.NodeName, withGPUs, driverName)
	}
	claim := s.podClaim(pod)
	result := s.allocatedDevice(claim)
	if result.Driver != driverName || result.Pool != withGPUs {
		t.Errorf("claim %s allocated %s/%s/%s, want a device of driver %s in pool %s", claim.Name, result.Driver, result.Pool, result.Device, driverName, withGPUs)
	}
	if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Name != "trainer" {
		t.Errorf("claim %s reservedFor = %+v, want the pod trainer", claim.Name, claim.Status.ReservedFor)
	}
}

// A pod for another scheduler is left alone. The drascope pod is created
// after it, so by the time the drascope pod is bound the scheduler has seen
// both: had it taken the foreign pod, that pod would be bound too.
func TestOtherSchedulerNameIsLeftAlone(t *testing.T) {
	s := newScenario(t, nil)
	s.addNode("gpus", 2)
	s.addClaimTemplate("gpu", false)
	s.addPod("foreign", "another-scheduler", fromTemplate("gpu"))
	s.addPod("mine", schedulerName, fromTemplate("gpu"))

	s.waitForPodScheduled("mine")
	foreign := s.getPod("foreign")
	if foreign.Spec.NodeName != "" {
		t.Fatalf("pod foreign (schedulerName another-scheduler) was bound to %s by drascope-scheduler", foreign.Spec.NodeName)
	}
	if c := scheduledCondition(foreign); c != nil {
		t.Errorf("pod foreign has a PodScheduled condition written by drascope-scheduler: %s %s: %s", c.Status, c.Reason, c.Message)
	}
}

// drascope_pending_pods counts a pod waiting for a GPU under its device
// class, and stops counting it once it is gone.
func TestPendingPodsMetric(t *testing.T) {
	s := newScenario(t, nil)
	s.addNode("gpu", 1)
	s.addClaimTemplate("gpu", false)
	s.addPod("first", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("first")
	s.addPod("second", schedulerName, fromTemplate("gpu"))
	s.waitForPodUnschedulable("second", noDeviceLeft)

	waitForPending := func(want float64) {
		t.Helper()
		waitForGauge(t, env.schedulerPort, "drascope_pending_pods", map[string]string{"device_class": deviceClassName}, want)
	}
	waitForPending(1)
	s.deletePod("second")
	waitForPending(0)
}

// Node pruning (pkg/nodeprune): Filter runs only on nodes that reach a free
// device. A pod pinned to a full node is refused there without Filter
// running; an unpinned one lands on the only node with a free GPU; with
// every GPU taken, PreFilter refuses the pod saying why; and a GPU freed
// later is found at once (the availability index prunes only when its
// in-use set is the cycle's, so no stale index can hide the freed node).
// The index, not only the pass over every slice, must have pruned for
// some of these pods; the pod no node can serve must have been refused
// before upstream's PreFilter (prunefirst.go), with the same words, and
// still be retried when a GPU frees; and the pod placed on the one node
// with a free GPU must have been pruned for first, its allocator built
// over that node's pool: tests run one at a time, so the counters moved
// for them.
func TestPruningLeavesNodesWithoutFreeDevicesOut(t *testing.T) {
	indexed := func() float64 {
		return max(0, scrapeGauge(t, "drascope_node_pruning_total", map[string]string{"answer": "Indexed"}))
	}
	prunedFirst := func(result string) float64 {
		return max(0, scrapeGauge(t, "drascope_early_refusals_total", map[string]string{"result": result}))
	}
	before, refusedBefore := indexed(), prunedFirst("Refused")
	s := newScenario(t, nil)
	nodes := []string{s.addNode("a", 1), s.addNode("b", 1), s.addNode("c", 1)}
	s.addClaimTemplate("gpu", false)
	for _, node := range nodes[:2] {
		s.addPodWith("on-"+node, schedulerName, fromTemplate("gpu"), pinTo(node))
		s.waitForPodScheduled("on-" + node)
	}

	s.addPodWith("pinned-to-full", schedulerName, fromTemplate("gpu"), pinTo(nodes[0]))
	s.waitForPodUnschedulable("pinned-to-full", "didn't satisfy plugin(s) [DRAScope]", "didn't match Pod's node affinity/selector")

	passedBefore := prunedFirst("Passed")
	s.addPod("anywhere", schedulerName, fromTemplate("gpu"))
	if got := s.waitForPodScheduled("anywhere").Spec.NodeName; got != nodes[2] {
		t.Errorf("pod anywhere landed on %s, want %s, the only node with a free GPU", got, nodes[2])
	}
	if after := prunedFirst("Passed"); after <= passedBefore {
		t.Errorf("drascope_early_refusals_total{result=\"Passed\"} stayed at %v: the pod placed was not pruned for before upstream's PreFilter", after)
	}

	s.addPod("waiting", schedulerName, fromTemplate("gpu"))
	s.waitForPodUnschedulable("waiting", "cannot allocate all claims: no node can reach a free device for every request")
	if after := prunedFirst("Refused"); after <= refusedBefore {
		t.Errorf("drascope_early_refusals_total{result=\"Refused\"} stayed at %v: the pod no node can serve was refused after upstream's PreFilter", after)
	}

	s.deletePod("on-" + nodes[1])
	if got := s.waitForPodScheduled("waiting").Spec.NodeName; got != nodes[1] {
		t.Errorf("pod waiting landed on %s, want %s, whose GPU was freed", got, nodes[1])
	}
	if after := indexed(); after <= before {
		t.Errorf("drascope_node_pruning_total{answer=\"Indexed\"} stayed at %v: the index never pruned", after)
	}
}

// pinTo gives the pod a nodeSelector for node.
func pinTo(node string) func(*v1.Pod) {
	return func(pod *v1.Pod) { pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node} }
}
