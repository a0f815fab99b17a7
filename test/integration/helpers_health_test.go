package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/internal/localcluster"
	drahealth "github.com/drascope/drascope/pkg/health"
)

// reportHealth writes device health into the pod's status as kubelet does
// (KEP-4680): the container "app" runs, and its entry for the pod's claim
// "gpu" lists each device with its health.
func (s *scenario) reportHealth(podName string, resources ...v1.ResourceHealth) {
	s.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := s.getPod(podName)
		pod.Status.Phase = v1.PodRunning
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{
			Name:                     "app",
			Image:                    "registry.k8s.io/pause:3.10",
			Ready:                    true,
			State:                    v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
			AllocatedResourcesStatus: []v1.ResourceStatus{{Name: "claim:gpu", Resources: resources}},
		}}
		_, err := env.client.CoreV1().Pods(s.namespace).UpdateStatus(s.ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		s.t.Fatalf("writing device health into the status of pod %s/%s: %v", s.namespace, podName, err)
	}
}

// health is one resource entry as kubelet writes it: <driver>/<pool>/<device>.
func health(pool, device string, h v1.ResourceHealthStatus, message string) v1.ResourceHealth {
	r := v1.ResourceHealth{ResourceID: v1.ResourceID(driverName + "/" + pool + "/" + device), Health: h}
	if message != "" {
		r.Message = &message
	}
	return r
}

// addMonitor runs, in the scenario's admin-labelled namespace, a pod whose
// admin-access claim observes every device of the class: as a health
// monitoring DaemonSet would, it gets health reports for devices nobody
// else may use, including withheld ones.
func (s *scenario) addMonitor(name string) {
	s.t.Helper()
	s.addMonitorBy(name, schedulerName)
}

// addMonitorBy is addMonitor with the pod placed by another scheduler.
func (s *scenario) addMonitorBy(name, scheduler string) {
	s.t.Helper()
	request := gpuClaimSpec(true).Devices.Requests[0]
	request.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	s.addClaimFor(name, request)
	s.addPod(name, scheduler, fromClaim(name))
	s.waitForPodScheduled(name)
}

// gpuNodeWithPod adds a node of gpus GPUs, the claim template "gpu", and a
// pod from it, and returns the node and the device the pod got.
func (s *scenario) gpuNodeWithPod(pod string, gpus int) (node, device string) {
	s.t.Helper()
	node = s.addNode("gpus", gpus)
	s.addClaimTemplate("gpu", false)
	s.addPod(pod, schedulerName, fromTemplate("gpu"))
	return node, s.allocatedDevice(s.podClaim(s.waitForPodScheduled(pod))).Device
}

// addPodAvoiding adds a pod from template "gpu" and fails the test if it
// gets the device broken (reported Unhealthy); why says when.
func (s *scenario) addPodAvoiding(name, broken, why string) {
	s.t.Helper()
	s.addPod(name, schedulerName, fromTemplate("gpu"))
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled(name))).Device; got == broken {
		s.t.Fatalf("%s, pod %s got %s, which kubelet reported Unhealthy", why, name, broken)
	}
}

// waitForWithheld waits until pod name is unschedulable with a message
// naming device of node as withheld, its reporter (the node's kubelet when
// reporter is "") and kubelet's message.
func (s *scenario) waitForWithheld(name, node, device, reporter, message string) {
	s.t.Helper()
	by := "reported by pod " + s.namespace + "/" + reporter + " at "
	if reporter == "" {
		by = "reported by kubelet on node " + node + " at "
	}
	s.waitForPodUnschedulable(name,
		"devices withheld because kubelet reported them Unhealthy",
		driverName+"/"+node+"/"+device,
		by,
		message)
}

// failWithHealth writes a pod's final status as kubelet does when a batch
// pod's device dies: phase Failed and the device health, in one update.
func (s *scenario) failWithHealth(podName string, resources ...v1.ResourceHealth) {
	s.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := s.getPod(podName)
		pod.Status.Phase = v1.PodFailed
		pod.Status.ContainerStatuses = []v1.ContainerStatus{{
			Name:                     "app",
			Image:                    "registry.k8s.io/pause:3.10",
			State:                    v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "CUDA error: unspecified launch failure", FinishedAt: metav1.Now()}},
			AllocatedResourcesStatus: []v1.ResourceStatus{{Name: "claim:gpu", Resources: resources}},
		}}
		_, err := env.client.CoreV1().Pods(s.namespace).UpdateStatus(s.ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		s.t.Fatalf("writing the final status of pod %s/%s: %v", s.namespace, podName, err)
	}
}

// waitForTaintRule waits until the DeviceTaintRule drascope writes for a
// device satisfies ok.
func (s *scenario) waitForTaintRule(node, device, want string, ok func(*resourceapi.DeviceTaintRule) bool) *resourceapi.DeviceTaintRule {
	s.t.Helper()
	name := drahealth.RuleName(drahealth.Device{Driver: driverName, Pool: node, Name: device})
	var rule *resourceapi.DeviceTaintRule
	var lastErr error
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		rule, lastErr = env.client.ResourceV1().DeviceTaintRules().Get(ctx, name, metav1.GetOptions{})
		return ok(rule), nil
	})
	if err != nil {
		s.t.Fatalf("DeviceTaintRule %s of %s/%s: want %s; last: %+v, %v", name, node, device, want, rule, lastErr)
	}
	return rule
}

// ruleExists and ruleGone are waitForTaintRule conditions.
func ruleExists(rule *resourceapi.DeviceTaintRule) bool { return rule != nil && rule.Name != "" }
func ruleGone(rule *resourceapi.DeviceTaintRule) bool   { return rule == nil || rule.Name == "" }

// counterAt reads a counter of the scheduler on port; 0 when it has no
// series yet.
func counterAt(t *testing.T, port int, name string, labels map[string]string) float64 {
	t.Helper()
	return max(scrapeGaugeAt(t, port, name, labels), 0)
}

// deletePod deletes a pod and waits until the resourceclaim controller has
// released its claim (without a garbage collector, a claim made from a
// template is deallocated, not deleted).
func (s *scenario) deletePod(name string) {
	s.t.Helper()
	claim := s.podClaim(s.getPod(name))
	if err := env.client.CoreV1().Pods(s.namespace).Delete(s.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		s.t.Fatalf("deleting pod %s/%s: %v", s.namespace, name, err)
	}
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		c, err := env.client.ResourceV1().ResourceClaims(s.namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		return isNotFound(err) || (err == nil && c.Status.Allocation == nil), nil
	})
	if err != nil {
		s.t.Fatalf("claim %s/%s of deleted pod %s was not released", s.namespace, claim.Name, name)
	}
}

func deviceStatus(rp *v1alpha1.ResourcePool, device string) v1alpha1.DeviceStatus {
	for _, d := range rp.Status.Devices {
		if d.Name == device {
			return d
		}
	}
	return v1alpha1.DeviceStatus{Name: device, State: "Available"}
}

// startHealthScheduler runs bin/drascope-scheduler with the shipped config
// under its own scheduler name and the given deviceHealth args, without
// leader election and ResourcePool publishing (the in-process scheduler
// holds those), and returns its secure port for /metrics.
func startHealthScheduler(t *testing.T, name, deviceHealth string) int {
	t.Helper()
	config, err := writeTempConfig(name, shippedConfigWith(t,
		"schedulerName: "+schedulerName, "schedulerName: "+name,
		"      adminAccess:", "      poolStatus:\n        publishResourcePools: false\n      deviceHealth:\n"+deviceHealth+"      adminAccess:",
	), env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, port := runSchedulerBinary(t, name, config, "--leader-elect=false")
	if err := localcluster.WaitForURL(context.Background(), "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", insecureClient(), name, b.Log); err != nil {
		t.Fatal(err)
	}
	return port
}

// waitForHealthGauge waits until the scheduler on port counts n devices of
// the node's pool with the given health: it has seen the report.
func waitForHealthGauge(t *testing.T, port int, node, health string, n float64) {
	t.Helper()
	waitForGauge(t, port, "drascope_resourcepool_device_health", map[string]string{"pool": node, "health": health}, n)
}

// unhealthyGPU starts a scheduler called name with the given deviceHealth
// args, and a scenario with a node of one GPU that a monitoring pod, placed
// by that scheduler, reports Unhealthy ("overheating"). It returns once the
// scheduler has the report, with the scenario, the node and its port.
// Run it while the in-process scheduler is stopped (restartScheduler): its
// policy Taint would otherwise taint the GPU for every scheduler.
func unhealthyGPU(t *testing.T, name, deviceHealth string) (*scenario, string, int) {
	t.Helper()
	port := startHealthScheduler(t, name, deviceHealth)
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpu", 1)
	s.addClaimTemplate("gpu", false)
	s.addMonitorBy("monitor", name)
	s.reportHealth("monitor", health(node, "gpu-0", v1.ResourceHealthStatusUnhealthy, "overheating"))
	waitForHealthGauge(t, port, node, "Unhealthy", 1)
	return s, node, port
}
