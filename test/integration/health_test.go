package integration

import (
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
)

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
