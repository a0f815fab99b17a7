package integration

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// manifests/admission/route-dra-pods-policy.yaml routes pods with claims to
// drascope-scheduler at create time, so that beside kube-scheduler only one
// scheduler allocates devices. A pod with a claim and no schedulerName
// lands with drascope's and is placed by it; a pod without claims, a pod
// naming another scheduler, and a pod in a namespace that opted out keep
// theirs.
func TestAdmissionPolicyRoutesDRAPods(t *testing.T) {
	s := newScenario(t, nil)
	s.applyAdmissionPolicy("route-dra-pods-policy.yaml", "drascope-route-dra-pods")
	s.addNode("gpus", 1)
	s.addClaimTemplate("gpu", false)
	optedOut := newScenario(t, map[string]string{"drascope.dev/route-dra-pods": "false"})
	optedOut.addClaimTemplate("gpu", false)

	// The apiserver loads policies through an informer: wait until a dry
	// run shows this one in force.
	probe := func() *v1.Pod {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "probe"},
			Spec: v1.PodSpec{
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}},
				Containers:     []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		created, err := env.client.CoreV1().Pods(s.namespace).Create(s.ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil
		}
		return created
	}
	if err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		p := probe()
		return p != nil && p.Spec.SchedulerName == schedulerName, nil
	}); err != nil {
		t.Fatalf("the policy did not route a dry-run pod with a claim to %s within %v", schedulerName, waitTimeout)
	}

	s.addPod("with-claim", "", fromTemplate("gpu"))
	if got := s.getPod("with-claim").Spec.SchedulerName; got != schedulerName {
		t.Errorf("pod with a claim and no schedulerName: schedulerName %q, want %q", got, schedulerName)
	}
	s.waitForPodScheduled("with-claim")

	// Defaulting runs before admission: asking for default-scheduler by
	// name is the same as leaving it out.
	s.addPod("named-default", v1.DefaultSchedulerName, fromTemplate("gpu"))
	if got := s.getPod("named-default").Spec.SchedulerName; got != schedulerName {
		t.Errorf("pod with a claim naming default-scheduler: schedulerName %q, want %q", got, schedulerName)
	}

	s.addPod("other-scheduler", "my-scheduler", fromTemplate("gpu"))
	if got := s.getPod("other-scheduler").Spec.SchedulerName; got != "my-scheduler" {
		t.Errorf("pod naming my-scheduler: schedulerName %q, want it kept", got)
	}
	// The scheduler says who else places pods with claims.
	waitForGauge(t, env.schedulerPort, "drascope_pods_with_claims", map[string]string{"scheduler": "my-scheduler"}, 1)

	optedOut.addPod("opted-out", "", fromTemplate("gpu"))
	if got := optedOut.getPod("opted-out").Spec.SchedulerName; got != v1.DefaultSchedulerName {
		t.Errorf("pod with a claim in a namespace labelled drascope.dev/route-dra-pods=false: schedulerName %q, want %q", got, v1.DefaultSchedulerName)
	}

	plain := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "no-claims"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	s.createPod(plain)
	if got := s.getPod("no-claims").Spec.SchedulerName; got != v1.DefaultSchedulerName {
		t.Errorf("pod without claims: schedulerName %q, want %q", got, v1.DefaultSchedulerName)
	}
}

// manifests/admission/gangs-disrupted-whole-policy.yaml gives gang
// PodGroups disruptionMode all, so that preemption evicts a gang whole or
// not at all; a gang annotated to be disrupted pod by pod, a basic
// PodGroup, and those of an opted-out namespace keep the default, single.
func TestAdmissionPolicyDisruptsGangsWhole(t *testing.T) {
	s := newScenario(t, nil)
	s.applyAdmissionPolicy("gangs-disrupted-whole-policy.yaml", "drascope-gangs-disrupted-whole")
	gang := schedulingapi.PodGroupSchedulingPolicy{Gang: &schedulingapi.GangSchedulingPolicy{MinCount: 2}}
	mode := func(group *schedulingapi.PodGroup) string {
		switch d := group.Spec.DisruptionMode; {
		case d == nil:
			return "unset"
		case d.All != nil:
			return "all"
		case d.Single != nil:
			return "single"
		}
		return "empty"
	}
	// The apiserver loads policies through an informer: wait until a dry
	// run shows this one in force.
	var last string
	if err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		probe := &schedulingapi.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: schedulingapi.PodGroupSpec{SchedulingPolicy: gang}}
		created, err := env.client.SchedulingV1beta1().PodGroups(s.namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "disruptionMode " + mode(created)
		return last == "disruptionMode all", nil
	}); err != nil {
		t.Fatalf("the policy did not give a dry-run gang disruptionMode all within %v: last %s", waitTimeout, last)
	}

	single := &schedulingapi.DisruptionMode{Single: &schedulingapi.SingleDisruptionMode{}}
	s.addPodGroupSpec("gang", schedulingapi.PodGroupSpec{SchedulingPolicy: gang})
	s.addPodGroupSpec("gang-naming-single", schedulingapi.PodGroupSpec{SchedulingPolicy: gang, DisruptionMode: single})
	s.addPodGroupSpec("basic", schedulingapi.PodGroupSpec{SchedulingPolicy: schedulingapi.PodGroupSchedulingPolicy{Basic: &schedulingapi.BasicSchedulingPolicy{}}})
	if _, err := env.client.SchedulingV1beta1().PodGroups(s.namespace).Create(s.ctx, &schedulingapi.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-by-pod", Annotations: map[string]string{"drascope.dev/disruption-mode": "single"}},
		Spec:       schedulingapi.PodGroupSpec{SchedulingPolicy: gang},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.deletePodGroup("pod-by-pod") })
	s.addPodGroupSpec("from-a-workload", schedulingapi.PodGroupSpec{SchedulingPolicy: gang, WorkloadRef: &schedulingapi.WorkloadReference{WorkloadName: "trainer", TemplateName: "workers"}})
	optedOut := newScenario(t, map[string]string{"drascope.dev/gangs-disrupted-whole": "false"})
	optedOut.addPodGroupSpec("gang", schedulingapi.PodGroupSpec{SchedulingPolicy: gang})
	for _, c := range []struct {
		s          *scenario
		name, want string
	}{
		{s, "gang", "all"},
		// Defaulting runs first: naming single looks like leaving it out.
		{s, "gang-naming-single", "all"},
		{s, "pod-by-pod", "single"},
		{s, "basic", "single"},
		{s, "from-a-workload", "single"},
		{optedOut, "gang", "single"},
	} {
		if got := mode(c.s.getPodGroup(c.name)); got != c.want {
			t.Errorf("PodGroup %s/%s: disruptionMode %s, want %s", c.s.namespace, c.name, got, c.want)
		}
	}
}

// applyAdmissionPolicy applies a file of manifests/admission holding a
// MutatingAdmissionPolicy and its binding, both named name, and deletes
// them when the test ends: cluster-wide while they exist, so none should
// outlive the test that knows of it.
func (s *scenario) applyAdmissionPolicy(file, name string) {
	s.t.Helper()
	if err := env.cp.ApplyFile(s.ctx, filepath.Join(repoRoot, "manifests/admission", file)); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ctx := context.Background()
		_ = env.client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = env.client.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	})
}
