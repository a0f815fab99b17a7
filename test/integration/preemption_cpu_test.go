package integration

import (
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DRAScope must not change preemption for resources other than devices.
// The soak's plans, with CPUs in place of GPUs on one node and each pod
// arriving once the last settled (and was deleted if left pending), run
// under the shipped
// drascope-scheduler profile and under a profile of upstream's plugins
// only (DynamicResources, no DRAScope) in bin/drascope-scheduler: the
// same kube-scheduler code drascope imports, as kube-scheduler v1.37.2
// runs it. Each seed must preempt the same number of pods under both.

const upstreamSchedulerName = "upstream-scheduler"

// cpuDifferentialSeeds are the soak seeds the differential replays.
const cpuDifferentialSeeds = 10

func TestPreemptionOfCPUMatchesUpstream(t *testing.T) {
	startUpstreamScheduler(t)
	// One seed at a time, the two schedulers side by side.
	for seed := uint64(1); seed <= cpuDifferentialSeeds; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			plan := planSoakCase(seed)
			var upstream, drascope cpuCaseResult
			var both sync.WaitGroup
			for _, run := range []struct {
				scheduler string
				result    *cpuCaseResult
			}{{upstreamSchedulerName, &upstream}, {schedulerName, &drascope}} {
				both.Add(1)
				go func() {
					defer both.Done()
					t.Run(run.scheduler, func(t *testing.T) { *run.result = runCPUCase(t, plan, run.scheduler) })
				}()
			}
			both.Wait()
			if t.Failed() {
				return
			}
			if len(upstream.victims) != len(drascope.victims) {
				t.Errorf("seed %d: upstream preempted %d pods %v, drascope-scheduler %d %v\nupstream's %s\ndrascope-scheduler's %s",
					seed, len(upstream.victims), upstream.victims, len(drascope.victims), drascope.victims, upstream.timeline, drascope.timeline)
			}
		})
	}
}

// startUpstreamScheduler runs bin/drascope-scheduler with one profile of
// upstream's default plugins, named upstreamSchedulerName, and the suite's
// workloadGates.
func startUpstreamScheduler(t *testing.T) {
	t.Helper()
	config, err := writeTempConfig("upstream-scheduler", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: `+upstreamSchedulerName+`
`, env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	runSchedulerBinary(t, "upstream-scheduler", config, append([]string{"--leader-elect=false"}, env.cp.FeatureGateArgs()...)...)
}

type cpuCaseResult struct {
	victims  []string
	timeline string
}

// runCPUCase builds the plan's cluster with CPUs for GPUs and returns the
// pods preempted once it settled.
func runCPUCase(t *testing.T, plan soakPlan, scheduler string) cpuCaseResult {
	s := newScenario(t, nil)
	victims := s.playKubelet()
	class := s.priorityClasses()
	// One node with all the plan's CPUs: with several, the two runs place
	// the holders differently (equal scores are broken at random) and
	// preempt on different nodes (so are equal candidates), and victim
	// counts may differ with both schedulers right.
	cpus := 0
	for _, n := range plan.nodes {
		cpus += n
	}
	nodes := []string{s.addCPUNode("n0", cpus)}
	for i, priority := range plan.holders {
		s.addCPUPod(fmt.Sprintf("holder-%d", i), scheduler, 1, withPriorityClass(class(priority, false)), onNodes(nodes))
	}
	for i := range plan.holders {
		s.waitForPodScheduled(fmt.Sprintf("holder-%d", i))
	}
	// Each pod once the last has settled, and a pod left pending deleted:
	// where pending pods race for CPU that preemption frees, upstream's
	// own victim counts vary from run to run, and the comparison would
	// measure the race. So each preemption decision is made on the same
	// bound pods under both schedulers.
	for _, p := range plan.stream {
		s.addCPUPod(p.name, scheduler, p.gpus, withPriorityClass(class(p.priority, p.never)), onNodes(nodes))
		s.settleStream(victims, soakPlan{nodes: plan.nodes, holders: plan.holders, stream: []soakPod{p}})
		if pod := s.getPod(p.name); pod.Spec.NodeName == "" {
			if err := env.client.CoreV1().Pods(s.namespace).Delete(s.ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatalf("deleting pending pod %s: %v", p.name, err)
			}
		}
	}
	return cpuCaseResult{victims: victims.list(), timeline: s.preemptionTimeline()}
}

// addCPUNode creates a Ready node with cpus CPUs and no devices.
func (s *scenario) addCPUNode(suffix string, cpus int) string {
	s.t.Helper()
	name := s.addNode(suffix, 0)
	node, err := env.client.CoreV1().Nodes().Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	node.Status.Capacity[v1.ResourceCPU] = *resource.NewQuantity(int64(cpus), resource.DecimalSI)
	node.Status.Allocatable = node.Status.Capacity
	if _, err := env.client.CoreV1().Nodes().UpdateStatus(s.ctx, node, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("setting the CPUs of node %s: %v", name, err)
	}
	return name
}

// addCPUPod creates a pod asking for cpus CPUs and no devices.
func (s *scenario) addCPUPod(name, scheduler string, cpus int, changes ...func(*v1.Pod)) {
	s.t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			SchedulerName: scheduler,
			Containers: []v1.Container{{
				Name:  "app",
				Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
					v1.ResourceCPU: *resource.NewQuantity(int64(cpus), resource.DecimalSI),
				}},
			}},
		},
	}
	for _, change := range changes {
		change(pod)
	}
	s.createPod(pod)
}
