package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// The tests of DeviceQuotas (docs/quota.md): each in a namespace, with a
// driver and a device class of its own, beside every other test's pods.

// quotaScenario is a why scenario (a driver and class of its own) with
// the namespace's DeviceQuotas at hand.
type quotaScenario struct {
	*why
	quotas interface {
		Create(context.Context, *v1alpha1.DeviceQuota, metav1.CreateOptions) (*v1alpha1.DeviceQuota, error)
		Get(context.Context, string, metav1.GetOptions) (*v1alpha1.DeviceQuota, error)
		Update(context.Context, *v1alpha1.DeviceQuota, metav1.UpdateOptions) (*v1alpha1.DeviceQuota, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	}
}

func newQuotaScenario(t *testing.T, labels map[string]string) *quotaScenario {
	t.Helper()
	w := newWhy(t, labels)
	client, err := versioned.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return &quotaScenario{why: w, quotas: client.DrascopeV1alpha1().DeviceQuotas(w.namespace)}
}

// limit creates (or replaces the limits of) a DeviceQuota on the
// scenario's class.
func (q *quotaScenario) limit(name string, amounts v1alpha1.DeviceAmounts) {
	q.t.Helper()
	spec := v1alpha1.DeviceQuotaSpec{Limits: []v1alpha1.DeviceClassLimit{{DeviceClassName: q.class, DeviceAmounts: amounts}}}
	existing, err := q.quotas.Get(q.ctx, name, metav1.GetOptions{})
	if err == nil {
		existing.Spec = spec
		_, err = q.quotas.Update(q.ctx, existing, metav1.UpdateOptions{})
	} else {
		_, err = q.quotas.Create(q.ctx, &v1alpha1.DeviceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	}
	if err != nil {
		q.t.Fatalf("DeviceQuota %s: %v", name, err)
	}
}

// pod creates a claim of the requests and a pod using it, both named name.
func (q *quotaScenario) pod(name string, requests ...resourceapi.DeviceRequest) {
	q.t.Helper()
	q.addClaimFor(name, requests...)
	q.addPod(name, schedulerName, fromClaim(name))
}

// gone deletes the pod and its claim, as a finished pod's would go.
func (q *quotaScenario) gone(name string) {
	q.t.Helper()
	q.deletePodNow(name)
	if err := env.client.ResourceV1().ResourceClaims(q.namespace).Delete(q.ctx, name, metav1.DeleteOptions{}); err != nil {
		q.t.Fatalf("deleting claim %s: %v", name, err)
	}
}

func devices(n int64) v1alpha1.DeviceAmounts { return v1alpha1.DeviceAmounts{Devices: ptr.To(n)} }

// Devices are counted as allocated: two GPUs of a limit of two go, the
// third pod waits with the quota named, the limit, what is used and what
// it needs, and is placed once a pod of the namespace is gone.
func TestDeviceQuotaCountsDevices(t *testing.T) {
	q := newQuotaScenario(t, nil)
	q.node("a", gpus(4, "a100")...)
	q.limit("gpus", devices(2))
	q.pod("one", q.request("gpu", 1))
	q.pod("two", q.request("gpu", 1))
	q.waitForPodScheduled("one")
	q.waitForPodScheduled("two")
	q.pod("three", q.request("gpu", 1))
	q.waitForPodUnschedulable("three", fmt.Sprintf("DeviceQuota %s/gpus: class %s, devices: limit 2, used 2, this pod needs 1", q.namespace, q.class))
	q.waitForStatus("gpus", 2, 0)
	q.gone("one")
	q.waitForPodScheduled("three")
	q.waitForStatus("gpus", 2, 0)
	q.gone("two")
	q.waitForStatus("gpus", 1, 1)
}

// waitForStatus waits until the quota's status shows the devices used and
// left of the scenario's class.
func (q *quotaScenario) waitForStatus(name string, used, left int64) {
	q.t.Helper()
	var status v1alpha1.DeviceQuotaStatus
	err := wait.PollUntilContextTimeout(q.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		quota, err := q.quotas.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		status = quota.Status
		return len(status.Classes) == 1 && status.Classes[0].DeviceClassName == q.class &&
			ptr.Deref(status.Classes[0].Used.Devices, -1) == used && ptr.Deref(status.Classes[0].Left.Devices, -1) == left &&
			status.ObservedGeneration == quota.Generation, nil
	})
	if err != nil {
		q.t.Fatalf("DeviceQuota %s: status %+v, want %d used and %d left: %v", name, status, used, left, err)
	}
}

// Partitions count by the shared counter they consume: two 40Gi halves
// fit a limit of 80Gi of memory; a third half, on another GPU, does not.
func TestDeviceQuotaCountsCounters(t *testing.T) {
	q := newQuotaScenario(t, nil)
	for _, name := range []string{"a", "b"} {
		node := q.addNode(name, 0)
		q.partitionable(node)
	}
	q.limit("memory", v1alpha1.DeviceAmounts{Counters: map[string]resource.Quantity{"memory": resource.MustParse("80Gi")}})
	half := func(name string) resourceapi.DeviceRequest {
		return q.request(name, 1, fmt.Sprintf("device.attributes[%q].memory == %q", q.driver, "40Gi"))
	}
	q.pod("first", half("half"))
	q.pod("second", half("half"))
	q.waitForPodScheduled("first")
	q.waitForPodScheduled("second")
	q.pod("third", half("half"))
	q.waitForPodUnschedulable("third", "counter memory: limit 80Gi, used 80Gi, this pod needs 40Gi")
}

// partitionable publishes on node a GPU of 80Gi as a counter set and its
// partitions: "whole" (80Gi) and two halves (40Gi), with their memory as
// an attribute.
func (q *quotaScenario) partitionable(node string) {
	q.t.Helper()
	spec := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	partition := func(name, memory string) resourceapi.Device {
		return resourceapi.Device{Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"memory": {StringValue: ptr.To(memory)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}}}}}
	}
	q.publishSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-counters"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: q.driver, Pool: spec, NodeName: &node,
		SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}},
	}})
	q.publishSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-partitions"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: q.driver, Pool: spec, NodeName: &node,
		Devices: []resourceapi.Device{partition("whole", "80Gi"), partition("half-a", "40Gi"), partition("half-b", "40Gi")},
	}})
}

// Two pods created back to back race for the last unit of a quota, 50
// times: never both are placed.
func TestDeviceQuotaRaceForTheLastUnit(t *testing.T) {
	q := newQuotaScenario(t, nil)
	q.node("a", gpus(4, "a100")...)
	q.limit("one", devices(1))
	const rounds = 50
	for i := range rounds {
		a, b := fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)
		q.addClaimFor(a, q.request("gpu", 1))
		q.addClaimFor(b, q.request("gpu", 1))
		q.addPod(a, schedulerName, fromClaim(a))
		q.addPod(b, schedulerName, fromClaim(b))
		var placed, refused []string
		err := wait.PollUntilContextTimeout(q.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			placed, refused = nil, nil
			for _, name := range []string{a, b} {
				pod := q.getPod(name)
				c := scheduledCondition(pod)
				switch {
				case pod.Spec.NodeName != "":
					placed = append(placed, name)
				case c != nil && c.Reason == v1.PodReasonUnschedulable:
					refused = append(refused, name)
				}
			}
			return len(placed) == 2 || len(placed)+len(refused) == 2, nil
		})
		if err != nil || len(placed) != 1 {
			t.Fatalf("round %d: placed %v, refused %v (%v): want exactly one placed", i, placed, refused, err)
		}
		q.gone(a)
		q.gone(b)
	}
	t.Logf("%d rounds: one pod of each pair placed, the other refused", rounds)
}

// A quota lowered below what is used evicts nothing and refuses what
// comes next; deleted, it limits nothing, and the pod it refused is
// placed.
func TestDeviceQuotaLoweredThenDeleted(t *testing.T) {
	q := newQuotaScenario(t, nil)
	q.node("a", gpus(4, "a100")...)
	q.limit("gpus", devices(2))
	q.pod("one", q.request("gpu", 1))
	q.pod("two", q.request("gpu", 1))
	q.waitForPodScheduled("one")
	q.waitForPodScheduled("two")
	q.limit("gpus", devices(1))
	q.pod("three", q.request("gpu", 1))
	q.waitForPodUnschedulable("three", "devices: limit 1, used 2, this pod needs 1")
	for _, name := range []string{"one", "two"} {
		if pod := q.getPod(name); pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
			t.Errorf("pod %s was disturbed by the lowered quota: %s", name, describeScheduling(pod))
		}
	}
	if err := q.quotas.Delete(q.ctx, "gpus", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	q.waitForPodScheduled("three")
}

// Admin access uses nothing (KEP-5018): a quota of zero devices does not
// refuse it, and refuses an ordinary request.
func TestDeviceQuotaIgnoresAdminAccess(t *testing.T) {
	q := newQuotaScenario(t, adminNamespaceLabels)
	q.node("a", gpus(2, "a100")...)
	q.limit("none", devices(0))
	monitor := q.request("gpu", 1)
	monitor.Exactly.AdminAccess = ptr.To(true)
	q.pod("monitor", monitor)
	q.waitForPodScheduled("monitor")
	q.pod("train", q.request("gpu", 1))
	q.waitForPodUnschedulable("train", "devices: limit 0, used 0, this pod needs 1")
}

// The API refuses a limit that limits nothing, and a negative quantity.
func TestDeviceQuotaValidation(t *testing.T) {
	q := newQuotaScenario(t, nil)
	for name, amounts := range map[string]v1alpha1.DeviceAmounts{
		"nothing":  {},
		"negative": {Counters: map[string]resource.Quantity{"memory": resource.MustParse("-1Gi")}},
	} {
		_, err := q.quotas.Create(q.ctx, &v1alpha1.DeviceQuota{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.DeviceQuotaSpec{Limits: []v1alpha1.DeviceClassLimit{{DeviceClassName: q.class, DeviceAmounts: amounts}}}}, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("%s: created, want refused", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
