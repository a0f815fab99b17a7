package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// Device searches that cannot succeed do not stop the scheduling loop,
// which serves every profile: a gang or a pod asking a node for more than
// it has stays pending with nothing allocated, and a plain pod with free
// GPUs elsewhere is placed meanwhile (docs/reliability.md, "Bounded
// searches and messages"). Upstream's allocator is a backtracking search
// that, asked for one device more than a node of identical devices has,
// tries every assignment before it fails; DRAScope's own runs (the gang
// planner's here) are counted out without a search, or end at their
// deadline.
//
// How long the plain pod waited is logged: the bound lives in
// docs/reliability.md and the benchmarks, not in this test.
func TestHostileRequestsDoNotStallScheduling(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hostile creates what must not stall the loop, pinned to node,
		// and returns the pods that must stay pending.
		hostile func(s *scenario, node string) []string
		// planned: the gang planner looks for devices for every member
		// at once, and finds none (drascope_gang_plans_total{result=
		// "NoPlan"}) without a timed-out run.
		planned bool
		// refusal, when set, is what the hostile pods' PodScheduled
		// condition must say, as Unschedulable: no search ran into
		// upstream's Filter timeout, which is a scheduling error.
		refusal string
	}{{
		name: "gang-17x1-on-16",
		hostile: func(s *scenario, node string) []string {
			s.addClaimTemplateForCount("one-gpu", 1)
			return s.addPinnedGang(17, fromTemplate("one-gpu"), node)
		},
		planned: true,
	}, {
		name: "gang-9x2-on-16",
		hostile: func(s *scenario, node string) []string {
			s.addClaimTemplateForCount("two-gpus", 2)
			return s.addPinnedGang(9, fromTemplate("two-gpus"), node)
		},
		planned: true,
	}, {
		// A GPU of 80Gi offered whole and as two halves: three devices,
		// but the shared counter holds two of them together at most.
		name: "gang-3-partitions-of-one-gpu",
		hostile: func(s *scenario, _ string) []string {
			node := s.addNode("partitioned", 0)
			s.addPartitionablePool("gpu-0", &node)
			s.createClaimTemplate("any-partition", resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: deviceClassName, Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf("device.attributes[%q].?partition.orValue(\"\") != \"\"", driverName),
				}}}},
			}}}})
			return s.addPinnedGang(3, fromTemplate("any-partition"), node)
		},
		planned: true,
	}, {
		// Upstream's Filter would search until filterTimeout (10 s) on
		// every attempt, as kube-scheduler does; DRAScope's Filter counts
		// the node's free GPUs first (searchguard.go).
		name: "pod-with-17-claims-on-16",
		hostile: func(s *scenario, node string) []string {
			s.addClaimTemplateForCount("one-gpu", 1)
			s.addPodWith("many-claims", schedulerName, fromTemplate("one-gpu"), onNodes([]string{node}), withClaims(17, "one-gpu"))
			return []string{"many-claims"}
		},
		refusal: "cannot allocate all claims",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, nil)
			counter := func(name, label, value string) float64 {
				return max(0, scrapeGauge(t, name, map[string]string{label: value}))
			}
			noPlans, timeouts := counter("drascope_gang_plans_total", "result", "NoPlan"), counter("drascope_allocation_runs_total", "outcome", "timeout")
			big, other := s.addNode("big", 16), s.addNode("other", 2)
			pending := tc.hostile(s, big)
			// The hostile pods' first cycle has ended: a stalled loop
			// never marks them.
			s.waitForPodNotScheduled(pending[0])

			s.addClaimTemplateForCount("plain-gpu", 1)
			start := time.Now()
			s.addPodWith("plain", schedulerName, fromTemplate("plain-gpu"), onNodes([]string{other}))
			s.waitForPodScheduled("plain")
			t.Logf("the plain pod was placed %v after it was created, beside %d hostile pods", time.Since(start).Round(10*time.Millisecond), len(pending))

			for _, name := range pending {
				pod := s.getPod(name)
				if pod.Spec.NodeName != "" {
					t.Errorf("pod %s was bound to %s", name, pod.Spec.NodeName)
				}
				if c := scheduledCondition(pod); tc.refusal != "" && (c == nil || c.Reason != v1.PodReasonUnschedulable || !strings.Contains(c.Message, tc.refusal)) {
					t.Errorf("pod %s: %s; want Unschedulable: %q", name, describeScheduling(pod), tc.refusal)
				}
			}
			if got := s.gangOutcome(); got != (gangOutcome{}) {
				t.Errorf("the gang holds %s; want nothing", got)
			}
			if allocated := s.allocatedClaims(); allocated != 1 {
				t.Errorf("%d claims allocated; want the plain pod's only", allocated)
			}
			if tc.planned {
				if got := counter("drascope_gang_plans_total", "result", "NoPlan"); got <= noPlans {
					t.Errorf("drascope_gang_plans_total{result=\"NoPlan\"} stayed at %v: the gang was not planned for", got)
				}
				if got := counter("drascope_allocation_runs_total", "outcome", "timeout"); got != timeouts {
					t.Errorf("drascope_allocation_runs_total{outcome=\"timeout\"} went from %v to %v: a run searched until its deadline", timeouts, got)
				}
			}
		})
	}
}

// waitForPodNotScheduled waits until the scheduler has tried the pod and
// not placed it, for any reason: unschedulable, or an error such as
// upstream's Filter timing out.
func (s *scenario) waitForPodNotScheduled(name string) {
	s.t.Helper()
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod = s.getPod(name)
		c := scheduledCondition(pod)
		return pod.Spec.NodeName == "" && c != nil && c.Status == v1.ConditionFalse, nil
	})
	if err != nil {
		s.t.Fatalf("pod %s/%s was not tried: %s (%v)", s.namespace, name, describeScheduling(pod), err)
	}
	s.t.Logf("pod %s: %s", name, describeScheduling(pod))
}

// addPinnedGang creates a PodGroup of n members, each with a claim from
// source, all allowed only on node, and returns their names.
func (s *scenario) addPinnedGang(n int, source podClaimSource, node string) []string {
	s.t.Helper()
	s.addPodGroup("gang", int32(n))
	var names []string
	for i := range n {
		s.addGangPod(i, "gang", schedulerName, source, []string{node})
		names = append(names, gangPodName(i))
	}
	return names
}

// withClaims gives the pod n claims from the template, each used by its
// container.
func withClaims(n int, template string) func(*v1.Pod) {
	return func(pod *v1.Pod) {
		pod.Spec.ResourceClaims, pod.Spec.Containers[0].Resources.Claims = nil, nil
		for i := range n {
			name := fmt.Sprintf("gpu-%d", i)
			pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)})
			pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: name})
		}
	}
}

// allocatedClaims counts the scenario's claims with an allocation.
func (s *scenario) allocatedClaims() int {
	s.t.Helper()
	claims, err := env.client.ResourceV1().ResourceClaims(s.namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	allocated := 0
	for _, claim := range claims.Items {
		if claim.Status.Allocation != nil {
			allocated++
		}
	}
	return allocated
}
