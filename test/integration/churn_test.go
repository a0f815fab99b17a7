package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// The scheduler's long-lived maps follow what exists, not what ever
// existed: memory that only grows is a leak. Rounds of churn each make
// pools (nodes with slices), pods with claims that run, report health,
// succeed, fail or are deleted while running, and then delete all of it
// (pods, claims, slices, nodes). Afterwards every map the runtime reports
// (draruntime.Runtime.StateSizes: side cache, health cache, release holds,
// waiting pods, publisher) is back at its size before the churn, except
// what is kept by design for a time:
//   - health_holdings and health_pods: a pod deleted while running is
//     remembered for health.holdingGrace (10 minutes), in case its final
//     status is on its way; at most one entry per such pod;
//   - publisher_deleted: the UIDs of deleted ResourcePools, for a minute,
//     at most one per pool deleted.
//
// Devices that left every slice leave the health cache at its second sweep
// after (1 minute apart), so the test waits up to 3 minutes for that.
func TestChurnLeavesNoState(t *testing.T) {
	const rounds, nodesPerRound, gpus = 4, 3, 2
	baseline := waitForQuietState(t)
	t.Logf("state before the churn: %v", baseline)
	deletedRunning := 0
	for round := range rounds {
		s := newScenario(t, nil)
		nodes := s.gpuNodes(nodesPerRound, gpus)
		pods := s.burst(fmt.Sprintf("r%d", round), nodesPerRound*gpus, schedulerName)
		devices := map[string]string{}
		for _, pod := range pods {
			p := s.waitForPodScheduled(pod)
			devices[pod] = p.Spec.NodeName + "/" + s.allocatedDevice(s.podClaim(p)).Device
		}
		report := func(pod string, h v1.ResourceHealthStatus) v1.ResourceHealth {
			node, device, _ := strings.Cut(devices[pod], "/")
			return health(node, device, h, "")
		}
		// A device reported Unhealthy and then Healthy by its reporter.
		s.reportHealth(pods[0], report(pods[0], v1.ResourceHealthStatusUnhealthy))
		s.reportHealth(pods[0], report(pods[0], v1.ResourceHealthStatusHealthy))
		// Pods that succeed or fail, reporting nothing or Healthy.
		s.finish(pods[1], v1.PodSucceeded)
		s.finish(pods[2], v1.PodSucceeded)
		s.failWithHealth(pods[3], report(pods[3], v1.ResourceHealthStatusHealthy))
		// pods[0] and pods[4:] are deleted while running.
		deletedRunning += len(pods) - 3
		s.cleanUp()
		s.deleteClaims()
		for _, node := range nodes {
			s.waitForResourcePoolGone(poolObjectName(t, node))
		}
	}

	allowance := map[string]int{
		"health_holdings":   deletedRunning,
		"health_pods":       deletedRunning,
		"publisher_deleted": rounds * nodesPerRound,
	}
	var last map[string]int
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		last = env.runtime.StateSizes()
		return len(grown(baseline, last, allowance)) == 0, nil
	})
	if err != nil {
		t.Errorf("after %d rounds of churn, maps are larger than before it (plus what is kept by design, %v):\n%s\nbefore: %v\nafter:  %v",
			rounds, allowance, strings.Join(grown(baseline, last, allowance), "\n"), baseline, last)
	}
	t.Logf("state after the churn: %v", last)
}

// waitForQuietState returns the runtime's map sizes once they stay the same
// for two seconds: what earlier tests left has settled.
func waitForQuietState(t *testing.T) map[string]int {
	t.Helper()
	var prev map[string]int
	stable := 0
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		now := env.runtime.StateSizes()
		if maps.Equal(now, prev) {
			stable++
		} else {
			stable = 0
		}
		prev = now
		return stable >= 2, nil
	})
	if err != nil {
		t.Logf("the state did not settle before the churn; starting from %v", prev)
	}
	return prev
}

// grown lists the maps larger than before plus their allowance.
func grown(before, after, allowance map[string]int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		if limit := before[name] + allowance[name]; after[name] > limit {
			out = append(out, fmt.Sprintf("%s: %d, at most %d (before: %d)", name, after[name], limit, before[name]))
		}
	}
	return out
}

// finish writes a pod's final status as kubelet does: phase, and its
// container terminated.
func (s *scenario) finish(podName string, phase v1.PodPhase) {
	s.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := s.getPod(podName)
		pod.Status.Phase = phase
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{
			Name:  "app",
			Image: "registry.k8s.io/pause:3.10",
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{FinishedAt: metav1.Now()}},
		}}
		_, err := env.client.CoreV1().Pods(s.namespace).UpdateStatus(s.ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		s.t.Fatalf("writing the final status of pod %s/%s: %v", s.namespace, podName, err)
	}
}
