package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/localcluster"
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
	spec := gpuClaimSpec(true)
	spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	if _, err := env.client.ResourceV1().ResourceClaims(s.namespace).Create(s.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ResourceClaim %s/%s: %v", s.namespace, name, err)
	}
	s.addPod(name, schedulerName, fromClaim(name))
	s.waitForPodScheduled(name)
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

// KEP-4680, the common failure: a GPU dies, its pod is deleted, and the
// replacement must not land on the same free, broken GPU. The device stays
// allocated while its pod runs, is withheld once free, a pod left only that
// device waits with a message naming it, and a Healthy report brings it back.
func TestUnhealthyDeviceIsAvoided(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpus", 2)
	pool := poolObjectName(t, node)
	s.addClaimTemplate("gpu", false)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))
	broken := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("trainer"))).Device

	s.reportHealth("trainer", health(node, broken, v1.ResourceHealthStatusUnhealthy, "ECC error count exceeded"))
	rp := s.waitForResourcePool(pool, broken+" Allocated and Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		d := deviceStatus(rp, broken)
		return d.State == "Allocated" && d.Health == "Unhealthy"
	})
	if d := deviceStatus(rp, broken); !strings.Contains(d.HealthMessage, "reported by pod "+s.namespace+"/trainer") || !strings.Contains(d.HealthMessage, "ECC error count exceeded") {
		t.Errorf("health message of %s: %q, want the pod and kubelet's message", broken, d.HealthMessage)
	}
	// Allocated devices are never taken away.
	if got := s.allocatedDevice(s.podClaim(s.getPod("trainer"))).Device; got != broken {
		t.Errorf("the running pod's claim now holds %s, want %s still", got, broken)
	}

	// The user deletes the crash-looping pod; its report outlives it.
	s.deletePod("trainer")
	s.waitForResourcePool(pool, broken+" Unavailable because Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		d := deviceStatus(rp, broken)
		return d.State == "Unavailable" && d.Reason == "Unhealthy" && strings.HasPrefix(d.Message, "reported by pod "+s.namespace+"/trainer")
	})
	if rp.Status.DeviceHealthPolicy != "Avoid" {
		t.Errorf("ResourcePool %s: deviceHealthPolicy %q, want the scheduler's, Avoid", pool, rp.Status.DeviceHealthPolicy)
	}
	s.addPod("replacement", schedulerName, fromTemplate("gpu"))
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("replacement"))).Device; got == broken {
		t.Fatalf("the replacement pod got %s, which kubelet reported Unhealthy", broken)
	}

	// Only the broken device is left: the next pod waits, and says why.
	s.addPod("third", schedulerName, fromTemplate("gpu"))
	s.waitForPodUnschedulable("third",
		"devices withheld because kubelet reported them Unhealthy",
		driverName+"/"+node+"/"+broken,
		"reported by pod "+s.namespace+"/trainer at ",
		"ECC error count exceeded")
	s.waitForResourcePool(pool, "1 allocated, 1 withheld", summaryIs(2, 1, 0, 1))
	if got := scrapeGauge(t, "drascope_resourcepool_device_health", map[string]string{"pool": node, "health": "Unhealthy"}); got != 1 {
		t.Errorf("drascope_resourcepool_device_health{health=Unhealthy} of %s: %v, want 1", node, got)
	}
	out, _, err := kubectlDRA(t, "describe", "pool", pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl dra describe pool %s:\n%s", pool, out)
	t.Logf("pod %s/third: %s", s.namespace, describeScheduling(s.getPod("third")))
	if findLine(out, broken, "Unavailable", "Unhealthy", "<none>", "Unhealthy:", "reported", "by", "pod", s.namespace+"/trainer") == nil {
		t.Errorf("kubectl dra describe pool does not show %s Unavailable with its health:\n%s", broken, out)
	}

	// A monitoring pod with admin access observes the device; kubelet now
	// reports it Healthy there. The waiting pod is retried and lands on it,
	// long before the scheduler's 5-minute retry of unschedulable pods.
	s.addMonitor("monitor")
	s.reportHealth("monitor", health(node, broken, v1.ResourceHealthStatusHealthy, ""))
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("third"))).Device; got != broken {
		t.Errorf("the waiting pod got %s, want %s, reported Healthy again", got, broken)
	}
}

// Malformed resource IDs in pod status are ignored and logged once each;
// they break nothing, and valid entries next to them still count.
func TestMalformedHealthReportsAreIgnored(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	s.addClaimTemplate("gpu", false)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))
	device := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("trainer"))).Device

	twoParts := v1.ResourceHealth{ResourceID: v1.ResourceID(driverName + "/" + s.namespace + "-gpu"), Health: v1.ResourceHealthStatusUnhealthy}
	unknownDriver := v1.ResourceHealth{ResourceID: v1.ResourceID("unknown-" + s.namespace + ".example.com/pool/dev-0"), Health: v1.ResourceHealthStatusUnhealthy}
	for _, message := range []string{"first", "second"} {
		s.reportHealth("trainer", twoParts, unknownDriver, health(node, device, v1.ResourceHealthStatusUnhealthy, message))
		s.waitForResourcePool(poolObjectName(t, node), "the valid report", func(rp *v1alpha1.ResourcePool) bool {
			return strings.HasSuffix(deviceStatus(rp, device).HealthMessage, ": "+message)
		})
	}

	klog.Flush() // the in-process scheduler logs through klog into this file
	data, err := os.ReadFile(env.schedulerLog)
	if err != nil {
		t.Fatal(err)
	}
	for id, reason := range map[v1.ResourceID]string{
		twoParts.ResourceID:      "got 2 part(s)",
		unknownDriver.ResourceID: "no ResourceSlice is published by driver",
	} {
		var lines []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "Ignoring a device health report that names no known device") && strings.Contains(line, `resourceID="`+string(id)+`"`) {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], reason) {
			t.Errorf("resource ID %s: logged %d times (want once, with %q): %q", id, len(lines), reason, lines)
		}
	}
	// The scheduler still schedules.
	s.addPod("next", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("next")
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
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b, err := startSchedulerBinary(name,
		"--config="+config, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(env.cp.Dir, name+"-certs"),
		"--authentication-kubeconfig="+env.schedulerKubeconfig,
		"--authorization-kubeconfig="+env.schedulerKubeconfig,
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.stop()
		if t.Failed() {
			t.Logf("%s output (last lines):\n%s", name, tail(b.output(), 60))
		}
	})
	if err := localcluster.WaitForURL(context.Background(), "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", insecureClient(), name, b.Log); err != nil {
		t.Fatal(err)
	}
	return port
}

// waitForHealthGauge waits until the scheduler on port counts n devices of
// the node's pool with the given health: it has seen the report.
func waitForHealthGauge(t *testing.T, port int, node, health string, n float64) {
	t.Helper()
	labels := map[string]string{"pool": node, "health": health}
	var got float64
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		got = scrapeGaugeAt(t, port, "drascope_resourcepool_device_health", labels)
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("drascope_resourcepool_device_health%v on port %d: %v, want %v", labels, port, got, n)
	}
}

// unhealthyGPU starts a scheduler called name with the given deviceHealth
// args, and a scenario with a node of one GPU that a monitoring pod reports
// Unhealthy ("overheating"). It returns once that scheduler has the report,
// with the scenario, the node and the scheduler's port.
func unhealthyGPU(t *testing.T, name, deviceHealth string) (*scenario, string, int) {
	t.Helper()
	port := startHealthScheduler(t, name, deviceHealth)
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpu", 1)
	s.addClaimTemplate("gpu", false)
	s.addMonitor("monitor")
	s.reportHealth("monitor", health(node, "gpu-0", v1.ResourceHealthStatusUnhealthy, "overheating"))
	waitForHealthGauge(t, port, node, "Unhealthy", 1)
	return s, node, port
}

// deviceHealth.unhealthyHoldTime: with no new report, an Unhealthy device
// becomes Unknown when its hold time ends, and the pod waiting for it is
// retried then, with no API event to trigger it.
func TestUnhealthyHoldTimeEnds(t *testing.T) {
	const name = "drascope-short-hold"
	s, node, port := unhealthyGPU(t, name, "        unhealthyHoldTime: 10s\n")
	s.addPod("waiting", name, fromTemplate("gpu"))
	s.waitForPodUnschedulable("waiting", driverName+"/"+node+"/gpu-0", "reported by pod "+s.namespace+"/monitor", "overheating")
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("waiting"))).Device; got != "gpu-0" {
		t.Errorf("the waiting pod got %s, want gpu-0", got)
	}
	waitForHealthGauge(t, port, node, "Unknown", 1)
}

// deviceHealth.policy Ignore allocates as upstream does: a device reported
// Unhealthy is handed out.
func TestDeviceHealthPolicyIgnore(t *testing.T) {
	const name = "drascope-health-ignore"
	s, _, _ := unhealthyGPU(t, name, "        policy: Ignore\n")
	s.addPod("ignorer", name, fromTemplate("gpu"))
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("ignorer"))).Device; got != "gpu-0" {
		t.Errorf("the pod got %s, want gpu-0", got)
	}
}
