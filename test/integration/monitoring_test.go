package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/internal/monitoring"
)

const monitoringDir = repoRoot + "/manifests/monitoring"

// TestAlertsFireOnTheSchedulersSeries runs the shipped alert rules, with
// drascope-alerts (promtool test rules' evaluation), over what the scheduler's /metrics really shows for a pool
// that ran dry while a pod waits for its class, an Unhealthy device, a pool
// publishing a device twice and a pool missing a slice: exactly the four
// alerts for them fire, and nothing else about these pools. The rule tests
// of manifests/monitoring/tests use hand-written series; this one fails
// when the rules and the exported series disagree on a name or a label.
func TestAlertsFireOnTheSchedulersSeries(t *testing.T) {
	s := newScenario(t, nil)

	// A class of this test's devices only, so that pools other tests leave
	// behind cannot satisfy it.
	class := s.namespace + "-gpu"
	if _, err := env.client.ResourceV1().DeviceClasses().Create(s.ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].?model.orValue(\"\") == %q", driverName, driverName, s.namespace)},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.ResourceV1().DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})

	node := s.addNode("gpus", 0)
	model := resourceapi.DeviceAttribute{StringValue: ptr.To(s.namespace)}
	s.publishSlice(&resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: sliceName(node)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driverName, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{
				{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": model}},
				// Not of the class: free all along, and it must not count.
				{Name: "nic-0"},
			},
		},
	})
	waitForGauge(t, env.schedulerPort, "drascope_device_class_available_devices", map[string]string{"device_class": class}, 1)

	request := gpuClaimSpec(false).Devices.Requests[0]
	request.Exactly.DeviceClassName = class
	for _, pod := range []string{"trainer", "waiting"} {
		s.addClaimFor(pod, request)
		s.addPod(pod, schedulerName, fromClaim(pod))
	}
	trainer := s.waitForPodScheduled("trainer")
	s.waitForPodUnschedulable("waiting", noDeviceLeft)
	device := s.allocatedDevice(s.podClaim(trainer)).Device
	s.reportHealth("trainer", health(node, device, v1.ResourceHealthStatusUnhealthy, "ECC error count exceeded"))

	duplicated := s.namespace + "-dup"
	dupSpec := resourceapi.ResourcePool{Name: duplicated, Generation: 1, ResourceSliceCount: 2}
	s.addSlice(duplicated+"-0", dupSpec, nil, "gpu-0", "gpu-1")
	s.addSlice(duplicated+"-1", dupSpec, nil, "gpu-1")
	partial := s.namespace + "-partial"
	s.addSlice(partial+"-0", resourceapi.ResourcePool{Name: partial, Generation: 1, ResourceSliceCount: 2}, nil, "gpu-0")

	waitForGauge(t, env.schedulerPort, "drascope_device_class_available_devices", map[string]string{"device_class": class}, 0)
	waitForGauge(t, env.schedulerPort, "drascope_pending_pods", map[string]string{"device_class": class}, 1)
	waitForGauge(t, env.schedulerPort, "drascope_resourcepool_device_health", map[string]string{"pool": node, "health": "Unhealthy"}, 1)
	waitForGauge(t, env.schedulerPort, "drascope_resourcepool_condition", map[string]string{"pool": duplicated, "condition": "Valid"}, 0)
	waitForGauge(t, env.schedulerPort, "drascope_resourcepool_condition", map[string]string{"pool": partial, "condition": "Complete"}, 0)

	// The alerts over every drascope series of this test's class and pools.
	series := monitoring.DrascopeGauges(scrapeMetrics(t), func(labels map[string]string) bool {
		return labels["device_class"] == class || slices.Contains([]string{node, duplicated, partial}, labels["pool"])
	})
	rules, err := os.ReadFile(monitoringDir + "/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	evaluator, err := localcluster.BinPath(env.cp.BinDir, "drascope-alerts")
	if err != nil {
		t.Fatal(err)
	}
	if err := monitoring.CheckAlerts(s.ctx, evaluator, rules, series, []monitoring.Alert{
		{Name: "DRADeviceClassExhausted", Labels: map[string]string{"severity": "warning", "device_class": class}},
		{Name: "DRADeviceUnhealthy", Labels: map[string]string{"severity": "warning", "driver": driverName, "pool": node, "node": node}},
		{Name: "DRAResourcePoolNotValid", Labels: map[string]string{"severity": "warning", "driver": driverName, "pool": duplicated}},
		{Name: "DRAResourcePoolIncomplete", Labels: map[string]string{"severity": "warning", "driver": driverName, "pool": partial}},
	}); err != nil {
		t.Fatal(err)
	}
}
