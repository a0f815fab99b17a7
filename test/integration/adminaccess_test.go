package integration

import (
	"testing"

	"k8s.io/utils/ptr"

	resourceapi "k8s.io/api/resource/v1"
)

// KEP-5018 (1): an admin-access claim gets a device even when every matching
// device is allocated to ordinary claims, and its result says adminAccess.
func TestAdminAccessOnFullNode(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpus", 2)
	s.addClaimTemplate("gpu", false)
	s.addClaimTemplate("gpu-admin", true)
	for _, name := range []string{"worker-0", "worker-1"} {
		s.addPod(name, schedulerName, fromTemplate("gpu"))
		s.waitForPodScheduled(name)
	}
	// The node is full for ordinary claims...
	s.addPod("worker-2", schedulerName, fromTemplate("gpu"))
	s.waitForPodUnschedulable("worker-2", noDeviceLeft)

	// ...but not for monitoring with admin access.
	s.addPod("monitor", schedulerName, fromTemplate("gpu-admin"))
	pod := s.waitForPodScheduled("monitor")
	if pod.Spec.NodeName != node {
		t.Errorf("monitor landed on %s, want %s", pod.Spec.NodeName, node)
	}
	result := s.allocatedDevice(s.podClaim(pod))
	if !ptr.Deref(result.AdminAccess, false) {
		t.Errorf("monitor's allocation result has adminAccess %v, want true", result.AdminAccess)
	}
}

// KEP-5018 (2): admin-access allocations never reduce availability: with N
// devices and M admin pods placed first, N ordinary pods still fit, and the
// N+1st does not (so the count is exact, not unlimited).
func TestAdminAccessDoesNotReduceAvailability(t *testing.T) {
	const devices, adminPods = 2, 3
	s := newScenario(t, adminNamespaceLabels)
	s.addNode("gpus", devices)
	s.addClaimTemplate("gpu", false)
	s.addClaimTemplate("gpu-admin", true)
	for i := range adminPods {
		name := "monitor-" + string(rune('a'+i))
		s.addPod(name, schedulerName, fromTemplate("gpu-admin"))
		s.waitForPodScheduled(name)
	}
	for i := range devices {
		name := "worker-" + string(rune('a'+i))
		s.addPod(name, schedulerName, fromTemplate("gpu"))
		s.waitForPodScheduled(name)
	}
	s.addPod("worker-extra", schedulerName, fromTemplate("gpu"))
	s.waitForPodUnschedulable("worker-extra", noDeviceLeft)
}

// KEP-5018 (4), beyond upstream: when the claim's namespace lacks the
// admin-access label at scheduling time, the pod is refused while filtering,
// with a message naming the namespace and the label, and nothing is
// allocated. A claim allocated while the label was there is left alone. When
// the label returns, the refused pod is retried and lands.
func TestAdminAccessRequiresNamespaceLabel(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpus", 1)
	// The apiserver checks the label when an admin claim is created, so both
	// claims are created while the namespace still has it.
	s.addClaim("granted", true)
	s.addClaim("pending", true)
	s.addPod("monitor-granted", schedulerName, fromClaim("granted"))
	s.waitForPodScheduled("monitor-granted")

	s.setNamespaceLabel(nil)
	s.addPod("monitor-pending", schedulerName, fromClaim("pending"))
	s.waitForPodUnschedulable("monitor-pending",
		"claim "+s.namespace+"/pending, request gpu",
		"namespace "+s.namespace,
		resourceapi.DRAAdminNamespaceLabelKey+`="true"`)
	if claim := s.getClaim("pending"); claim.Status.Allocation != nil || len(claim.Status.ReservedFor) != 0 {
		t.Errorf("refused claim was touched: allocation %+v, reservedFor %+v", claim.Status.Allocation, claim.Status.ReservedFor)
	}

	// Already allocated: another pod may still use it.
	s.addPod("monitor-granted-2", schedulerName, fromClaim("granted"))
	if pod := s.waitForPodScheduled("monitor-granted-2"); pod.Spec.NodeName != node {
		t.Errorf("monitor-granted-2 landed on %s, want %s where its claim is allocated", pod.Spec.NodeName, node)
	}

	s.setNamespaceLabel(ptr.To("true"))
	pod := s.waitForPodScheduled("monitor-pending")
	result := s.allocatedDevice(s.podClaim(pod))
	if !ptr.Deref(result.AdminAccess, false) {
		t.Errorf("monitor-pending's allocation result has adminAccess %v, want true", result.AdminAccess)
	}
}

// KEP-5018 on a partitionable GPU (kubernetes/kubernetes#140729, which
// drascope works around): a workload uses the whole GPU; a monitor with
// admin access still gets it, and uses none of its counters up: a workload
// asking for a partition still waits. Taints still apply to admin access,
// and a claim mixing admin and ordinary requests keeps upstream's counters
// and says so.
func TestAdminAccessOnAFullyUsedPartitionableGPU(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpu", 0)
	pool := s.addPartitionablePool("gpu", &node, map[string]resourceapi.DeviceTaint{
		"half-b": {Key: "maintenance", Value: "fan", Effect: resourceapi.DeviceTaintEffectNoSchedule},
	})

	s.addClaimFor("workload", partitionRequest("gpu", "whole", false))
	s.addPod("workload", schedulerName, fromClaim("workload"))
	s.waitForPodScheduled("workload")

	s.addClaimFor("monitor", partitionRequest("gpu", "whole", true))
	s.addPod("monitor", schedulerName, fromClaim("monitor"))
	pod := s.waitForPodScheduled("monitor")
	if result := s.allocatedDevice(s.podClaim(pod)); result.Device != "whole" || result.Pool != pool || !ptr.Deref(result.AdminAccess, false) {
		t.Errorf("monitor's allocation %+v: want the whole GPU of %s with adminAccess", result, pool)
	}

	// The counters really are used up, by the workload alone.
	s.addClaimFor("partition", partitionRequest("gpu", "half-a", false))
	s.addPod("partition", schedulerName, fromClaim("partition"))
	s.waitForPodUnschedulable("partition", "cannot allocate all claims")
	s.waitForResourcePool(poolObjectName(t, pool), "the whole GPU allocated once, the halves out of counters", summaryIs(3, 1, 0, 2))

	// Taints apply to admin access too.
	s.addClaimFor("monitor-tainted", partitionRequest("gpu", "half-b", true))
	s.addPod("monitor-tainted", schedulerName, fromClaim("monitor-tainted"))
	s.waitForPodUnschedulable("monitor-tainted", "cannot allocate all claims")

	// Admin access and an ordinary request in one claim: upstream's
	// counters, and the pod says so.
	s.addClaimFor("mixed", partitionRequest("observe", "whole", true), partitionRequest("use", "half-a", false))
	s.addPod("mixed", schedulerName, fromClaim("mixed"))
	s.waitForPodUnschedulable("mixed", "cannot allocate all claims", "kubernetes/kubernetes#140729")
}
