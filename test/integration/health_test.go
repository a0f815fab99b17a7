package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	drahealth "github.com/drascope/drascope/pkg/health"
)

// KEP-4680, the common failure: a GPU dies, its pod is deleted, and the
// replacement must not land on the same free, broken GPU. The device stays
// allocated while its pod runs, is withheld once free, a pod left only that
// device waits with a message naming it, and a Healthy report brings it back.
func TestUnhealthyDeviceIsAvoided(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node, broken := s.gpuNodeWithPod("trainer", 2)
	pool := poolObjectName(t, node)

	s.reportHealth("trainer", health(node, broken, v1.ResourceHealthStatusUnhealthy, "ECC error count exceeded"))
	rp := s.waitForResourcePool(pool, broken+" Allocated and Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		d := deviceStatus(rp, broken)
		return d.State == "Allocated" && d.Health == "Unhealthy"
	})
	// A ResourcePool is cluster-scoped: it names the node whose kubelet
	// reported the device, never the tenant's pod or namespace.
	// (The test's node is named after the namespace: look for the pod.)
	if d := deviceStatus(rp, broken); !strings.Contains(d.HealthMessage, "reported by kubelet on node "+node) || !strings.Contains(d.HealthMessage, "ECC error count exceeded") ||
		strings.Contains(d.HealthMessage, "trainer") || strings.Contains(d.HealthMessage, "pod") {
		t.Errorf("health message of %s: %q, want the node, kubelet's message and no pod", broken, d.HealthMessage)
	}
	// Policy Taint: the device gets a NoSchedule DeviceTaintRule that says
	// who reported it, when and why.
	rule := s.waitForTaintRule(node, broken, "created", ruleExists)
	// A rule is cluster-scoped: it carries the reporter's UID, never its
	// name or namespace.
	if a := rule.Annotations; a[drahealth.AnnotationReporter] != string(s.getPod("trainer").UID) || a[drahealth.AnnotationReportedBy] != "" || a[drahealth.AnnotationMessage] != "ECC error count exceeded" ||
		a[drahealth.AnnotationNode] != node || a[drahealth.AnnotationReportedAt] == "" ||
		rule.Labels[drahealth.ManagedByLabel] != drahealth.ManagedBy || rule.Spec.Taint.Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("DeviceTaintRule %s: labels %v, annotations %v, taint %+v", rule.Name, rule.Labels, rule.Annotations, rule.Spec.Taint)
	}
	// Allocated devices are never taken away.
	if got := s.allocatedDevice(s.podClaim(s.getPod("trainer"))).Device; got != broken {
		t.Errorf("the running pod's claim now holds %s, want %s still", got, broken)
	}

	// The user deletes the crash-looping pod; its report outlives it.
	s.deletePod("trainer")
	s.waitForResourcePool(pool, broken+" Unavailable because Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		d := deviceStatus(rp, broken)
		return d.State == "Unavailable" && d.Reason == "Unhealthy" && strings.HasPrefix(d.Message, "reported by kubelet on node "+node)
	})
	if rp.Status.DeviceHealthPolicy != "Taint" {
		t.Errorf("ResourcePool %s: deviceHealthPolicy %q, want the scheduler's default, Taint", pool, rp.Status.DeviceHealthPolicy)
	}
	s.addPodAvoiding("replacement", broken, "after its reporter was deleted")

	// Only the broken device is left: the next pod waits, and says why.
	s.addPod("third", schedulerName, fromTemplate("gpu"))
	s.waitForWithheld("third", node, broken, "trainer", "ECC error count exceeded")
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
	if findLine(out, broken, "Unavailable", "Unhealthy", "<none>", "Unhealthy:", "reported", "by", "kubelet", "on", "node", node) == nil || strings.Contains(out, "trainer") {
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
	s.waitForTaintRule(node, broken, "deleted once the device is Healthy", ruleGone)
}

// Malformed resource IDs in pod status are ignored and logged once each;
// they break nothing, and valid entries next to them still count.
func TestMalformedHealthReportsAreIgnored(t *testing.T) {
	s := newScenario(t, nil)
	node, device := s.gpuNodeWithPod("trainer", 2)

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

// The batch-job failure: kubelet writes phase Failed and the device
// Unhealthy in one status update, which the scheduler's pod informer never
// shows (it lists only pods that have not ended), and the resourceclaim
// controller releases the claim at once. The report is seen all the same,
// persisted as a DeviceTaintRule, and survives a scheduler restart: no
// later pod gets the device, and the one left only that device says why.
func TestFailedPodsReportSurvivesRestart(t *testing.T) {
	s := newScenario(t, nil)
	node, broken := s.gpuNodeWithPod("job", 3)

	s.failWithHealth("job", health(node, broken, v1.ResourceHealthStatusUnhealthy, "Xid 79: GPU has fallen off the bus"))
	rule := s.waitForTaintRule(node, broken, "created from the failed pod's report", ruleExists)
	if got, want := rule.Annotations[drahealth.AnnotationReporter], string(s.getPod("job").UID); got != want {
		t.Errorf("DeviceTaintRule %s names reporter UID %q, want job's, %s", rule.Name, got, want)
	}
	// The resourceclaim controller deleted the failed pod's claim already.
	if err := env.client.CoreV1().Pods(s.namespace).Delete(s.ctx, "job", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	s.addPodAvoiding("next", broken, "after the failed pod was deleted")

	restartScheduler(t, func() {})
	s.addPodAvoiding("after-restart", broken, "after a scheduler restart")
	s.addPod("last", schedulerName, fromTemplate("gpu"))
	// The restarted scheduler knows the reporter by the UID its rule holds
	// (a rule names no pod), and the pod is gone: the node's kubelet is
	// named.
	s.waitForWithheld("last", node, broken, "", "Xid 79")
}

// Only a holder is believed: a pod that reports, as Unhealthy, a device
// none of its claims holds is ignored (counted, and logged once), and a pod
// needing that device gets it.
func TestHealthReportsFromNonHoldersAreIgnored(t *testing.T) {
	s := newScenario(t, nil)
	node, victimDevice := s.gpuNodeWithPod("victim", 2)
	s.addPod("liar", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("liar")
	s.deletePod("victim")

	ignored := map[string]string{"reason": drahealth.IgnoredNotHolder}
	before := counterAt(t, env.schedulerPort, "drascope_device_health_reports_ignored_total", ignored)
	offset := schedulerLogLength(t)
	s.reportHealth("liar", health(node, victimDevice, v1.ResourceHealthStatusUnhealthy, "I say so"))
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return counterAt(t, env.schedulerPort, "drascope_device_health_reports_ignored_total", ignored) > before, nil
	})
	if err != nil {
		t.Fatalf("drascope_device_health_reports_ignored_total%v did not grow past %v", ignored, before)
	}
	s.reportHealth("liar", health(node, victimDevice, v1.ResourceHealthStatusUnhealthy, "I still say so"))
	s.addPod("needs-it", schedulerName, fromTemplate("gpu"))
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("needs-it"))).Device; got != victimDevice {
		t.Errorf("pod needs-it got %s, want %s, the only free device", got, victimDevice)
	}
	logs := schedulerLogSince(t, offset)
	if n := strings.Count(logs, "Ignoring device health reports about devices the pod does not hold"); n != 1 {
		t.Errorf("the untrusted report was logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs, s.namespace+"/liar") {
		t.Errorf("the log does not name the pod:\n%s", logs)
	}
}

// deviceHealth.unhealthyHoldTime counts from when the last report went
// away: a pod that keeps reporting a device Unhealthy keeps it withheld
// past the hold time; once that pod is deleted the device comes back when
// the hold time has passed, and the pod waiting for it is retried then,
// with no API event to trigger it.
func TestUnhealthyHoldTime(t *testing.T) {
	restartScheduler(t, func() {
		const name = "drascope-short-hold"
		const holdTime = 3 * time.Second
		s, node, port := unhealthyGPU(t, name, "        unhealthyHoldTime: 3s\n")
		s.addPod("waiting", name, fromTemplate("gpu"))
		s.waitForPodUnschedulable("waiting", driverName+"/"+node+"/gpu-0", "reported by pod "+s.namespace+"/monitor", "overheating")

		// The monitor keeps reporting it: withheld past the hold time.
		time.Sleep(2 * holdTime)
		if pod := s.getPod("waiting"); pod.Spec.NodeName != "" {
			t.Fatalf("pod waiting was scheduled to %s while the monitor still reports gpu-0 Unhealthy", pod.Spec.NodeName)
		}
		waitForHealthGauge(t, port, node, "Unhealthy", 1)

		deleted := time.Now()
		if err := env.client.CoreV1().Pods(s.namespace).Delete(s.ctx, "monitor", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("waiting"))).Device; got != "gpu-0" {
			t.Errorf("the waiting pod got %s, want gpu-0", got)
		}
		if waited := time.Since(deleted); waited < holdTime {
			t.Errorf("pod waiting was scheduled %v after the monitor was deleted, before the %v hold time ended", waited, holdTime)
		}

		// A finished pod's report lasts a hold time from its finish, though
		// the Failed pod is kept (as Jobs keep them): whoever may write its
		// status cannot keep the device out of service for good.
		// finishedAt is stored to the second: the hold may start up to a
		// second before the write.
		failed := time.Now().Truncate(time.Second)
		s.failWithHealth("waiting", health(node, "gpu-0", v1.ResourceHealthStatusUnhealthy, "Xid 79"))
		s.addPod("after-failure", name, fromTemplate("gpu"))
		if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("after-failure"))).Device; got != "gpu-0" {
			t.Errorf("the pod after the failure got %s, want gpu-0", got)
		}
		if waited := time.Since(failed); waited < holdTime {
			t.Errorf("pod after-failure was scheduled %v after its predecessor failed reporting gpu-0 Unhealthy, before the %v hold time ended", waited, holdTime)
		}
		if pod := s.getPod("waiting"); pod.Status.Phase != v1.PodFailed {
			t.Errorf("pod waiting is %s, want it kept Failed", pod.Status.Phase)
		}
	})
}

// An operator puts a device back into service before its hold time ends
// (kubectl dra health clear): the clear is a write to drascope's
// DeviceTaintRule, which the apiserver audits and RBAC limits; the
// scheduler sets the reports aside and deletes the rule, and the pod
// waiting for the device gets it, although the Failed pod that reported it
// is kept with its status unchanged.
func TestOperatorClearsADevice(t *testing.T) {
	s := newScenario(t, nil)
	node, broken := s.gpuNodeWithPod("job", 1)
	s.failWithHealth("job", health(node, broken, v1.ResourceHealthStatusUnhealthy, "Xid 79"))
	rule := s.waitForTaintRule(node, broken, "created from the failed pod's report", ruleExists)
	s.addPod("next", schedulerName, fromTemplate("gpu"))
	s.waitForWithheld("next", node, broken, "job", "Xid 79")

	device := driverName + "/" + node + "/" + broken
	if _, _, err := kubectlDRA(t, "health", "clear", driverName+"/"+node+"/no-such-gpu"); err == nil || !strings.Contains(err.Error(), "has no DeviceTaintRule of drascope's") {
		t.Errorf("clearing a device without a rule: %v, want an error saying there is no rule", err)
	}
	offset := schedulerLogLength(t)
	out, _, err := kubectlDRA(t, "health", "clear", device, "--wait")
	if err != nil {
		t.Fatalf("kubectl dra health clear %s: %v\n%s", device, err, out)
	}
	if !strings.Contains(out, "clear requested for "+device) || !strings.Contains(out, "back in service") {
		t.Errorf("kubectl dra health clear said:\n%s", out)
	}
	if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("next"))).Device; got != broken {
		t.Errorf("the waiting pod got %s, want %s, cleared", got, broken)
	}
	if current, err := env.client.ResourceV1().DeviceTaintRules().Get(s.ctx, rule.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("DeviceTaintRule %s is back after the clear: %v", rule.Name, current.Annotations)
	}
	if logs := schedulerLogSince(t, offset); !strings.Contains(logs, "an operator cleared it") || !strings.Contains(logs, broken) {
		t.Errorf("the scheduler's log does not say an operator cleared %s:\n%s", device, logs)
	}
}

// DeviceTaintRules are drascope's only when it wrote them: a rule of the
// same name without drascope's label is left alone, the shipped admission
// policy refuses a NoExecute rule or an unlabelled one from drascope's
// ServiceAccount, and a monitoring pod with admin access (tolerating
// drascope's taint) still lands on a node whose only GPU is tainted.
func TestDeviceTaintRulesBelongToDrascope(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpu", 1)
	s.addMonitor("monitor")
	s.reportHealth("monitor", health(node, "gpu-0", v1.ResourceHealthStatusUnhealthy, "overheating"))
	own := s.waitForTaintRule(node, "gpu-0", "created", ruleExists)

	// A second monitor lands on the node, its only GPU tainted.
	s.addMonitor("monitor-2")

	// The shipped ValidatingAdmissionPolicy, as drascope's ServiceAccount.
	asScheduler := asScheduler(t)
	evicting := own.DeepCopy()
	evicting.ObjectMeta = metav1.ObjectMeta{Name: "drascope-evict-" + s.namespace, Labels: own.Labels}
	evicting.Spec.Taint.Effect = resourceapi.DeviceTaintEffectNoExecute
	if _, err := asScheduler.ResourceV1().DeviceTaintRules().Create(s.ctx, evicting, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "only write DeviceTaintRules whose taint effect is NoSchedule") {
		t.Errorf("a NoExecute rule from drascope's ServiceAccount: %v, want refused by the admission policy", err)
	}
	otherKey := own.DeepCopy()
	otherKey.ObjectMeta = metav1.ObjectMeta{Name: "drascope-other-key-" + s.namespace, Labels: own.Labels}
	otherKey.Spec.Taint.Key = "example.com/maintenance"
	if _, err := asScheduler.ResourceV1().DeviceTaintRules().Create(s.ctx, otherKey, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "taint key drascope.dev/unhealthy") {
		t.Errorf("a rule with another taint key from drascope's ServiceAccount: %v, want refused by the admission policy", err)
	}
	unlabelled := own.DeepCopy()
	unlabelled.ObjectMeta = metav1.ObjectMeta{Name: "drascope-unlabelled-" + s.namespace}
	if _, err := asScheduler.ResourceV1().DeviceTaintRules().Create(s.ctx, unlabelled, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "labelled app.kubernetes.io/managed-by=drascope-scheduler") {
		t.Errorf("an unlabelled rule from drascope's ServiceAccount: %v, want refused by the admission policy", err)
	}

	// Deleted by hand, the rule comes back; edited to select another
	// device, it is deleted and the right one written again.
	if err := env.client.ResourceV1().DeviceTaintRules().Delete(s.ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	back := s.waitForTaintRule(node, "gpu-0", "put back after a delete by hand", func(rule *resourceapi.DeviceTaintRule) bool {
		return ruleExists(rule) && rule.UID != own.UID
	})
	edited := back.DeepCopy()
	edited.Spec.DeviceSelector.Device = ptr.To("gpu-9")
	if _, err := env.client.ResourceV1().DeviceTaintRules().Update(s.ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitForTaintRule(node, "gpu-0", "rewritten after its selector was edited", func(rule *resourceapi.DeviceTaintRule) bool {
		return ruleExists(rule) && rule.UID != back.UID && *rule.Spec.DeviceSelector.Device == "gpu-0"
	})

	// An administrator's rule under the name drascope would use for another
	// node's GPU, without drascope's label, is left alone when that GPU is
	// reported Unhealthy.
	other := s.addNode("other", 1)
	foreign := &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{
			Name:        drahealth.RuleName(drahealth.Device{Driver: driverName, Pool: other, Name: "gpu-0"}),
			Annotations: map[string]string{"owner": "admin"},
		},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(driverName), Pool: ptr.To(other), Device: ptr.To("gpu-0")},
			Taint:          resourceapi.DeviceTaint{Key: "example.com/inventory", Effect: resourceapi.DeviceTaintEffectNone},
		},
	}
	if _, err := env.client.ResourceV1().DeviceTaintRules().Create(s.ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.ResourceV1().DeviceTaintRules().Delete(context.Background(), foreign.Name, metav1.DeleteOptions{})
	})
	offset := schedulerLogLength(t)
	s.addMonitor("monitor-other")
	if node := s.getPod("monitor-other").Spec.NodeName; node != other {
		// The monitors ask for all GPUs of the node they land on; the
		// first two took the first node.
		t.Fatalf("monitor-other landed on %s, want %s", node, other)
	}
	s.reportHealth("monitor-other", health(other, "gpu-0", v1.ResourceHealthStatusUnhealthy, "overheating"))
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		logs := schedulerLogSince(t, offset)
		return strings.Contains(logs, "was not written by drascope; leaving it alone") && strings.Contains(logs, foreign.Name), nil
	})
	if err != nil {
		t.Fatalf("the scheduler did not log that it leaves rule %s alone:\n%s", foreign.Name, schedulerLogSince(t, offset))
	}
	got, err := env.client.ResourceV1().DeviceTaintRules().Get(s.ctx, foreign.Name, metav1.GetOptions{})
	if err != nil || got.Spec.Taint.Key != "example.com/inventory" || got.Annotations["owner"] != "admin" || len(got.Labels) != 0 || got.Generation != 1 {
		t.Errorf("the administrator's rule %s: %+v, %v; want it untouched", foreign.Name, got, err)
	}
}

// deviceHealth.policy Ignore allocates as upstream does: a device reported
// Unhealthy is handed out, and no DeviceTaintRule is written.
func TestDeviceHealthPolicyIgnore(t *testing.T) {
	restartScheduler(t, func() {
		const name = "drascope-health-ignore"
		s, node, _ := unhealthyGPU(t, name, "        policy: Ignore\n")
		s.addPod("ignorer", name, fromTemplate("gpu"))
		if got := s.allocatedDevice(s.podClaim(s.waitForPodScheduled("ignorer"))).Device; got != "gpu-0" {
			t.Errorf("the pod got %s, want gpu-0", got)
		}
		name0 := drahealth.RuleName(drahealth.Device{Driver: driverName, Pool: node, Name: "gpu-0"})
		if _, err := env.client.ResourceV1().DeviceTaintRules().Get(s.ctx, name0, metav1.GetOptions{}); !isNotFound(err) {
			t.Errorf("DeviceTaintRule %s under policy Ignore: %v, want none", name0, err)
		}
		// A rule left from policy Taint is deleted: switching the policy
		// away from Taint must not leave devices tainted for every scheduler.
		leftover := drahealth.RuleFor(drahealth.Report{
			Device: drahealth.Device{Driver: driverName, Pool: node, Name: "gpu-0"},
			Health: v1.ResourceHealthStatusUnhealthy, Pod: s.namespace + "/gone", Since: time.Now(),
		})
		if _, err := env.client.ResourceV1().DeviceTaintRules().Create(s.ctx, leftover, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		s.waitForTaintRule(node, "gpu-0", "deleted by the scheduler under policy Ignore", ruleGone)
	})
}

// One holder cannot clear what another reports: while the trainer's status
// says its GPU is Unhealthy, a monitoring pod holding the same device
// (admin access) that writes it Healthy leaves it Unhealthy, withheld and
// tainted; the trainer's own Healthy report ends it. The monitor's report of
// the other GPU as Unhealthy, in the same status write, shows when the
// scheduler has taken it.
func TestAHolderCannotClearAnotherHoldersReport(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node, broken := s.gpuNodeWithPod("trainer", 2)
	other := "gpu-0"
	if broken == other {
		other = "gpu-1"
	}
	pool := poolObjectName(t, node)
	s.reportHealth("trainer", health(node, broken, v1.ResourceHealthStatusUnhealthy, "Xid 79"))
	s.waitForTaintRule(node, broken, "created from the trainer's report", ruleExists)

	s.addMonitor("monitor")
	s.reportHealth("monitor", health(node, broken, v1.ResourceHealthStatusHealthy, ""), health(node, other, v1.ResourceHealthStatusUnhealthy, "fan"))
	rp := s.waitForResourcePool(pool, other+" Unhealthy from the monitor's report", func(rp *v1alpha1.ResourcePool) bool {
		return deviceStatus(rp, other).Health == "Unhealthy"
	})
	if d := deviceStatus(rp, broken); d.Health != "Unhealthy" || !strings.Contains(d.HealthMessage, "Xid 79") {
		t.Errorf("%s after another holder reported it Healthy: %+v, want Unhealthy as the trainer reports it", broken, d)
	}
	s.waitForTaintRule(node, broken, "kept", ruleExists)

	s.reportHealth("trainer", health(node, broken, v1.ResourceHealthStatusHealthy, ""))
	s.waitForTaintRule(node, broken, "deleted once the trainer reports it Healthy", ruleGone)
}
