package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// DRA-aware preemption (docs/preemption.md), end to end: the shipped
// config (DRAScope, then DefaultPreemption), the resourceclaim controller
// deleting the claims of preempted pods, and the test finishing the
// deletions a kubelet would.

// A full cluster of GPUs held by low-priority pods: a high-priority pod
// needing one GPU preempts exactly one of them and runs on its GPU. Node
// pruning must keep the nodes where lower-priority pods hold devices for
// this: with every GPU in use it would otherwise leave no node at all.
func TestPreemptionFreesOneGPU(t *testing.T) {
	s := newScenario(t, nil)
	low, high := s.priorityClass("low", 0), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	s.addNode("a", 2)
	s.addNode("b", 2)
	s.addClaimTemplate("gpu", false)
	held := map[string]string{} // device -> pod
	for _, name := range []string{"training-0", "training-1", "training-2", "training-3"} {
		s.addPodWith(name, schedulerName, fromTemplate("gpu"), withPriorityClass(low))
		pod := s.waitForPodScheduled(name)
		held[s.deviceOf(pod)] = name
	}

	s.addPodWith("inference", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	pod := s.waitForPodScheduled("inference")
	gone := victims.list()
	if len(gone) != 1 {
		t.Fatalf("preempted %v, want exactly one training pod", gone)
	}
	if device := s.deviceOf(pod); held[device] != gone[0] {
		t.Errorf("inference got %s, held by %s before; want the GPU of the one it preempted, %s", device, held[device], gone[0])
	}
	s.expectBound(without([]string{"training-0", "training-1", "training-2", "training-3"}, gone[0])...)
	s.expectEvent(gone[0], "Preempted", "Preempted by pod")
}

// A pod needing two GPUs preempts on one node only: the two victims on
// the node it lands on, nothing elsewhere.
func TestPreemptionForTwoGPUsStaysOnOneNode(t *testing.T) {
	s := newScenario(t, nil)
	low, high := s.priorityClass("low", 0), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	s.addNode("a", 2)
	s.addNode("b", 2)
	s.addClaimTemplate("gpu", false)
	s.addClaimTemplateForCount("two-gpus", 2)
	nodeOf := map[string]string{}
	for _, name := range []string{"training-0", "training-1", "training-2", "training-3"} {
		s.addPodWith(name, schedulerName, fromTemplate("gpu"), withPriorityClass(low))
		nodeOf[name] = s.waitForPodScheduled(name).Spec.NodeName
	}

	s.addPodWith("big", schedulerName, fromTemplate("two-gpus"), withPriorityClass(high))
	pod := s.waitForPodScheduled("big")
	gone := victims.list()
	if len(gone) != 2 || nodeOf[gone[0]] != pod.Spec.NodeName || nodeOf[gone[1]] != pod.Spec.NodeName {
		t.Errorf("big landed on %s and preempted %v (nodes %v); want the two pods of that node only", pod.Spec.NodeName, gone, nodeOf)
	}
}

// preemptionPolicy: Never waits, and says why, naming the DRA reason.
func TestPreemptionPolicyNeverWaits(t *testing.T) {
	s := newScenario(t, nil)
	low := s.priorityClass("low", 0)
	highNever := s.priorityClass("high-never", 1000, v1.PreemptNever)
	victims := s.playKubelet()
	s.addNode("a", 1)
	s.addClaimTemplate("gpu", false)
	s.addPodWith("training", schedulerName, fromTemplate("gpu"), withPriorityClass(low))
	s.waitForPodScheduled("training")

	s.addPodWith("polite", schedulerName, fromTemplate("gpu"), withPriorityClass(highNever))
	s.waitForPodUnschedulable("polite", "cannot allocate all claims")
	// Give a wrong preemption time to happen before checking it did not.
	time.Sleep(2 * time.Second)
	if gone := victims.list(); len(gone) != 0 {
		t.Errorf("a pod with preemptionPolicy Never preempted %v", gone)
	}
}

// A claim shared by a victim and a pod that is not one frees nothing. The
// pod sharing the claim is the least important victim, so preemption tries
// to keep the other (which holds a GPU alone) first: only if the shared
// claim were wrongly counted as freed would that one be spared.
func TestPreemptionDoesNotCountSharedClaimsAsFreed(t *testing.T) {
	s := newScenario(t, nil)
	lowest, low, high := s.priorityClass("lowest", 0), s.priorityClass("low", 10), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	node := s.addNode("a", 2)
	s.addClaim("shared", false)
	s.addClaimTemplate("gpu", false)
	s.addPodWith("serving", schedulerName, fromClaim("shared"), withPriorityClass(high))
	s.waitForPodScheduled("serving")
	s.addPodWith("sidecar", schedulerName, fromClaim("shared"), withPriorityClass(lowest))
	s.waitForPodScheduled("sidecar")
	s.addPodWith("training", schedulerName, fromTemplate("gpu"), withPriorityClass(low))
	trainingDevice := s.deviceOf(s.waitForPodScheduled("training"))

	s.addPodWith("inference", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	pod := s.waitForPodScheduled("inference")
	if gone := victims.list(); !slices.Equal(gone, []string{"training"}) {
		t.Errorf("preempted %v, want [training]: preempting sidecar frees nothing while serving uses the claim", gone)
	}
	if pod.Spec.NodeName != node || s.deviceOf(pod) != trainingDevice {
		t.Errorf("inference got %s on %s, want %s, the GPU training held", s.deviceOf(pod), pod.Spec.NodeName, trainingDevice)
	}
	s.expectBound("serving", "sidecar")
}

// Standalone claims of victims (not from templates) are deallocated by the
// resourceclaim controller once the victim is gone, and the GPU moves on.
func TestPreemptionWithStandaloneClaimVictims(t *testing.T) {
	s := newScenario(t, nil)
	low, high := s.priorityClass("low", 0), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	s.addNode("a", 1)
	s.addClaim("batch-claim", false)
	s.addClaimTemplate("gpu", false)
	s.addPodWith("training", schedulerName, fromClaim("batch-claim"), withPriorityClass(low))
	device := s.deviceOf(s.waitForPodScheduled("training"))

	s.addPodWith("inference", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	pod := s.waitForPodScheduled("inference")
	if gone := victims.list(); !slices.Equal(gone, []string{"training"}) {
		t.Errorf("preempted %v, want [training]", gone)
	}
	if got := s.deviceOf(pod); got != device {
		t.Errorf("inference got %s, want %s", got, device)
	}
	if claim := s.getClaim("batch-claim"); claim.Status.Allocation != nil {
		t.Errorf("claim batch-claim of the preempted pod is still allocated: %+v", claim.Status.Allocation)
	}
}

// Victims a PodDisruptionBudget protects are skipped when another choice
// exists; pods watching a device through admin access are never chosen,
// since they hold nothing.
func TestPreemptionSkipsProtectedAndAdminAccessPods(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	watcher, low, high := s.priorityClass("watcher", 0), s.priorityClass("low", 10), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	a, b := s.addNode("a", 1), s.addNode("b", 1)
	s.addClaimTemplate("gpu", false)
	s.addClaimTemplate("monitor", true)
	s.addPodWith("protected", schedulerName, fromTemplate("gpu"), withPriorityClass(low), withNodeName(a), withLabel("app", "protected"))
	s.waitForPodScheduled("protected")
	s.addPodWith("unprotected", schedulerName, fromTemplate("gpu"), withPriorityClass(low), withNodeName(b))
	s.waitForPodScheduled("unprotected")
	// Less important than the training pods, so preemption tries to keep
	// unprotected first: only if monitor were wrongly counted as holding
	// the GPU would unprotected be spared and monitor go.
	s.addPodWith("monitor", schedulerName, fromTemplate("monitor"), withPriorityClass(watcher), withNodeName(b))
	s.waitForPodScheduled("monitor")
	s.addPDB("protected", 1)

	s.addPodWith("inference", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	pod := s.waitForPodScheduled("inference")
	if gone := victims.list(); !slices.Equal(gone, []string{"unprotected"}) {
		t.Errorf("preempted %v, want [unprotected]: protected has a PDB, monitor holds nothing", gone)
	}
	if pod.Spec.NodeName != b {
		t.Errorf("inference landed on %s, want %s", pod.Spec.NodeName, b)
	}
	s.expectBound("protected", "monitor")
}

// Two preemptors at once never get the same device, and each preempts one
// victim.
func TestTwoPreemptorsAtOnce(t *testing.T) {
	s := newScenario(t, nil)
	low, high := s.priorityClass("low", 0), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	s.addNode("a", 2)
	s.addNode("b", 1)
	s.addClaimTemplate("gpu", false)
	for _, name := range []string{"training-0", "training-1", "training-2"} {
		s.addPodWith(name, schedulerName, fromTemplate("gpu"), withPriorityClass(low))
		s.waitForPodScheduled(name)
	}
	s.addPodWith("inference-0", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	s.addPodWith("inference-1", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	first := s.deviceOf(s.waitForPodScheduled("inference-0"))
	second := s.deviceOf(s.waitForPodScheduled("inference-1"))
	if first == second {
		t.Errorf("both preemptors got %s", first)
	}
	if gone := victims.list(); len(gone) != 2 {
		t.Errorf("preempted %v, want two training pods", gone)
	}
	// checkNoDeviceAllocatedTwice runs when the test ends.
}

// A preemptor whose victims are gone but whose claims the resourceclaim
// controller has yet to deallocate waits for them: without a terminating
// pod on its nominated node DefaultPreemption would find it eligible
// again and preempt a second victim. A ValidatingAdmissionPolicy holds the
// deallocation back while the preemptor is retried.
func TestPreemptorWaitsForTheReleaseOfItsVictimsDevices(t *testing.T) {
	s := newScenario(t, nil)
	low, high := s.priorityClass("low", 0), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	s.addNode("a", 2)
	s.addNode("b", 2)
	s.addClaimTemplateLabelled("gpu", map[string]string{holdReleaseLabel: "true"})
	for _, name := range []string{"training-0", "training-1", "training-2", "training-3"} {
		s.addPodWith(name, schedulerName, fromTemplate("gpu"), withPriorityClass(low))
		s.waitForPodScheduled(name)
	}
	release := s.holdClaimRelease()
	s.addPodWith("inference", schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	var gone []string
	if err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		gone = victims.list()
		return len(gone) > 0, nil
	}); err != nil {
		t.Fatalf("inference preempted nothing: %s", describeScheduling(s.getPod("inference")))
	}
	// The preemptor is retried on events: DRAScope's, since it rejected
	// the pod. In a busy cluster some come while the devices are released;
	// here an unrelated ResourceSlice plays that part.
	s.addSliceOf("other.example.com", "unrelated", "device-0")
	s.waitForPodUnschedulable("inference", "waiting for devices on node")
	release()
	s.waitForPodScheduled("inference")
	if gone := victims.list(); len(gone) != 1 {
		t.Errorf("preempted %v, want exactly one training pod: the preemptor must wait for its victim's devices", gone)
	}
}

const holdReleaseLabel = "test.drascope.dev/hold-release"

// holdClaimRelease makes the apiserver refuse to deallocate the
// scenario's claims labelled holdReleaseLabel until the returned function
// is called.
func (s *scenario) holdClaimRelease() (release func()) {
	s.t.Helper()
	name := s.namespace + "-hold-release"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.namespace}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceclaims/status"}},
				}}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "labelled",
				Expression: `has(object.metadata.labels) && '` + holdReleaseLabel + `' in object.metadata.labels`,
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `!has(oldObject.status.allocation) || has(object.status.allocation)`,
				Message:    "deallocation held back by the test",
			}},
		},
	}
	if _, err := env.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(s.ctx, policy, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ValidatingAdmissionPolicy %s: %v", name, err)
	}
	if _, err := env.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(s.ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ValidatingAdmissionPolicyBinding %s: %v", name, err)
	}
	release = func() {
		_ = env.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = env.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	s.t.Cleanup(release)
	// The policy takes effect once the apiserver has loaded it: until a
	// probe claim's deallocation is refused.
	probe := "hold-release-probe"
	s.addClaimFor(probe, gpuClaimSpec(false).Devices.Requests...)
	claim := s.getClaim(probe)
	claim.Labels = map[string]string{holdReleaseLabel: "true"}
	claim, err := env.client.ResourceV1().ResourceClaims(s.namespace).Update(s.ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		s.t.Fatalf("labelling the probe claim: %v", err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: driverName, Pool: "probe", Device: "probe",
	}}}}
	if claim, err = env.client.ResourceV1().ResourceClaims(s.namespace).UpdateStatus(s.ctx, claim, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("allocating the probe claim: %v", err)
	}
	err = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		deallocated := claim.DeepCopy()
		deallocated.Status.Allocation = nil
		_, err := env.client.ResourceV1().ResourceClaims(s.namespace).UpdateStatus(ctx, deallocated, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "deallocation held back"), nil
	})
	if err != nil {
		s.t.Fatalf("the policy holding deallocations back never took effect: %v", err)
	}
	if err := env.client.ResourceV1().ResourceClaims(s.namespace).Delete(s.ctx, probe, metav1.DeleteOptions{}); err != nil {
		s.t.Fatalf("deleting the probe claim: %v", err)
	}
	return release
}

// addSliceOf publishes an all-nodes slice of another driver, which no
// claim of the tests can use; it is deleted when the test ends.
func (s *scenario) addSliceOf(driver, pool string, devices ...string) {
	s.t.Helper()
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.namespace + "-" + pool},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, AllNodes: ptr.To(true),
			Pool: resourceapi.ResourcePool{Name: s.namespace + "-" + pool, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for _, d := range devices {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: d})
	}
	s.publishSlice(slice)
}

// addClaimTemplateLabelled creates a one-GPU template whose claims carry
// labels.
func (s *scenario) addClaimTemplateLabelled(name string, labels map[string]string) {
	s.t.Helper()
	if _, err := env.client.ResourceV1().ResourceClaimTemplates(s.namespace).Create(s.ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: gpuClaimSpec(false)},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ResourceClaimTemplate %s/%s: %v", s.namespace, name, err)
	}
}

// Many preemptors at once on a full cluster: each preempts one pod, and
// every one of them runs.
func TestManyPreemptorsAtOnce(t *testing.T) {
	s := newScenario(t, nil)
	low, high := s.priorityClass("low", 0), s.priorityClass("high", 1000)
	victims := s.playKubelet()
	const nodes, gpus, urgent = 6, 2, 8
	for i := range nodes {
		s.addNode(fmt.Sprintf("n%d", i), gpus)
	}
	s.addClaimTemplate("gpu", false)
	for i := range nodes * gpus {
		s.addPodWith(fmt.Sprintf("batch-%d", i), schedulerName, fromTemplate("gpu"), withPriorityClass(low))
	}
	for i := range nodes * gpus {
		s.waitForPodScheduled(fmt.Sprintf("batch-%d", i))
	}
	for i := range urgent {
		s.addPodWith(fmt.Sprintf("urgent-%d", i), schedulerName, fromTemplate("gpu"), withPriorityClass(high))
	}
	devices := map[string]string{}
	for i := range urgent {
		name := fmt.Sprintf("urgent-%d", i)
		device := s.deviceOf(s.waitForPodScheduled(name))
		if other, ok := devices[device]; ok {
			t.Errorf("%s and %s both got %s", other, name, device)
		}
		devices[device] = name
	}
	if gone := victims.list(); len(gone) != urgent {
		t.Errorf("preempted %d pods (%v), want %d: one for each urgent pod", len(gone), gone, urgent)
	}
}

// priorityClass creates a PriorityClass for this scenario, deleted when
// the test ends, and returns its name. Its preemptionPolicy is policy, or
// the default.
func (s *scenario) priorityClass(suffix string, value int32, policy ...v1.PreemptionPolicy) string {
	s.t.Helper()
	name := s.namespace + "-" + suffix
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if len(policy) > 0 {
		class.PreemptionPolicy = &policy[0]
	}
	if _, err := env.client.SchedulingV1().PriorityClasses().Create(s.ctx, class, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating PriorityClass %s: %v", name, err)
	}
	s.t.Cleanup(func() {
		_ = env.client.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func withPriorityClass(name string) func(*v1.Pod) {
	return func(pod *v1.Pod) { pod.Spec.PriorityClassName = name }
}

// withNodeName pins a pod to a node through node affinity (the scheduler
// still schedules it, as it does DaemonSet pods).
func withNodeName(node string) func(*v1.Pod) {
	return func(pod *v1.Pod) {
		pod.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node},
			}}}},
		}}}
	}
}

func withLabel(key, value string) func(*v1.Pod) {
	return func(pod *v1.Pod) {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[key] = value
	}
}

// addPDB protects the pods labelled app=name with minAvailable.
func (s *scenario) addPDB(name string, minAvailable int) {
	s.t.Helper()
	if _, err := env.client.PolicyV1().PodDisruptionBudgets(s.namespace).Create(s.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(int32(minAvailable))),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating PodDisruptionBudget %s: %v", name, err)
	}
	// Without the disruption controller, the budget's status is written
	// here: no disruption allowed.
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pdb, err := env.client.PolicyV1().PodDisruptionBudgets(s.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: int32(minAvailable), DesiredHealthy: int32(minAvailable), ExpectedPods: int32(minAvailable)}
		_, err = env.client.PolicyV1().PodDisruptionBudgets(s.namespace).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		s.t.Fatalf("setting the status of PodDisruptionBudget %s: %v", name, err)
	}
}

// addClaimTemplateForCount creates a template asking for count GPUs.
func (s *scenario) addClaimTemplateForCount(name string, count int64) {
	s.t.Helper()
	spec := gpuClaimSpec(false)
	spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	spec.Devices.Requests[0].Exactly.Count = count
	s.createClaimTemplate(name, spec)
}

// deviceOf names the device of the pod's one-device claim as pool/device.
func (s *scenario) deviceOf(pod *v1.Pod) string {
	s.t.Helper()
	result := s.allocatedDevice(s.podClaim(pod))
	return result.Pool + "/" + result.Device
}

// expectBound checks that the pods exist and are bound.
func (s *scenario) expectBound(names ...string) {
	s.t.Helper()
	for _, name := range names {
		pod, err := env.client.CoreV1().Pods(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			s.t.Errorf("pod %s: %v", name, err)
		case pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil:
			s.t.Errorf("pod %s: want bound and not deleted, got node %q, deletion %v", name, pod.Spec.NodeName, pod.DeletionTimestamp)
		}
	}
}

// expectEvent waits for an event about the pod with the reason and a note
// containing note.
func (s *scenario) expectEvent(pod, reason, note string) {
	s.t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		events, err := env.client.EventsV1().Events(s.namespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + pod})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Note)
			if e.Reason == reason && strings.Contains(e.Note, note) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Errorf("pod %s: want an event %s with %q, got %v", pod, reason, note, seen)
	}
}

func without(names []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == name })
}

// preempted are the pods whose deletion the test finished, as a kubelet
// would once their containers stopped.
type preempted struct {
	mu    sync.Mutex
	names []string
}

func (p *preempted) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := slices.Clone(p.names)
	sort.Strings(names)
	return names
}

// playKubelet finishes the deletion of the scenario's pods that are being
// deleted with a grace period (preemption's victims): without a kubelet
// they would stay Terminating. It stops when the test ends.
func (s *scenario) playKubelet() *preempted {
	p := &preempted{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			pods, err := env.client.CoreV1().Pods(s.namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, pod := range pods.Items {
				if pod.DeletionTimestamp == nil {
					continue
				}
				err := env.client.CoreV1().Pods(s.namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
					GracePeriodSeconds: ptr.To[int64](0),
					Preconditions:      &metav1.Preconditions{UID: &pod.UID},
				})
				if err == nil {
					p.mu.Lock()
					p.names = append(p.names, pod.Name)
					p.mu.Unlock()
				}
			}
			return false, nil
		})
	}()
	s.t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}
