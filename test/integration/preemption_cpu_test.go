package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DRAScope must not change preemption for resources other than devices.
// The soak's shapes, with CPU in place of GPUs, run under the shipped
// drascope-scheduler profile and under a profile of upstream's plugins
// only (DynamicResources, no DRAScope) in bin/drascope-scheduler: the
// same kube-scheduler code drascope imports, as kube-scheduler v1.37.1
// runs it. Each seed must preempt the same number of pods under both.

const upstreamSchedulerName = "upstream-scheduler"

// cpuDifferentialSeeds are the soak seeds the differential replays.
const cpuDifferentialSeeds = 16

func TestPreemptionOfCPUMatchesUpstream(t *testing.T) {
	startUpstreamScheduler(t)
	var wg sync.WaitGroup
	slots := make(chan struct{}, *soakParallel)
	for seed := uint64(1); seed <= cpuDifferentialSeeds; seed++ {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
				plan := planSoakCase(seed)
				var upstream, drascope []string
				var both sync.WaitGroup
				for _, run := range []struct {
					scheduler string
					victims   *[]string
				}{{upstreamSchedulerName, &upstream}, {schedulerName, &drascope}} {
					both.Add(1)
					go func() {
						defer both.Done()
						t.Run(run.scheduler, func(t *testing.T) { *run.victims = runCPUCase(t, plan, run.scheduler) })
					}()
				}
				both.Wait()
				if t.Failed() {
					return
				}
				if len(upstream) != len(drascope) {
					t.Errorf("seed %d: upstream preempted %d pods %v, drascope-scheduler %d %v", seed, len(upstream), upstream, len(drascope), drascope)
				}
			})
		}()
	}
	wg.Wait()
}

// startUpstreamScheduler runs bin/drascope-scheduler with one profile of
// upstream's default plugins, named upstreamSchedulerName.
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
	runSchedulerBinary(t, "upstream-scheduler", config, "--leader-elect=false")
}

// runCPUCase builds the plan's cluster with CPUs for GPUs and returns the
// pods preempted once it settled.
func runCPUCase(t *testing.T, plan soakPlan, scheduler string) []string {
	s := newScenario(t, nil)
	victims := s.playKubelet()
	class := s.priorityClasses()
	var nodes []string
	for i, cpus := range plan.nodes {
		nodes = append(nodes, s.addCPUNode(fmt.Sprintf("n%d", i), cpus))
	}
	for i, priority := range plan.holders {
		s.addCPUPod(fmt.Sprintf("holder-%d", i), scheduler, 1, withPriorityClass(class(priority, false)), onNodes(nodes))
	}
	for i := range plan.holders {
		s.waitForPodScheduled(fmt.Sprintf("holder-%d", i))
	}
	for _, p := range plan.stream {
		time.Sleep(p.gap)
		s.addCPUPod(p.name, scheduler, p.gpus, withPriorityClass(class(p.priority, p.never)), onNodes(nodes))
	}
	s.settleStream(victims, plan)
	return victims.list()
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
