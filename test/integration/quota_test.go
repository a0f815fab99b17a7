package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	// The metrics show the quota full and the pod waiting.
	series := map[string]string{"namespace": q.namespace, "devicequota": "gpus", "device_class": q.class, "amount": "devices"}
	waitForGauge(t, env.schedulerPort, "drascope_devicequota_used", series, 2)
	waitForGauge(t, env.schedulerPort, "drascope_devicequota_limit", series, 2)
	waitForGauge(t, env.schedulerPort, "drascope_devicequota_refused_pods", map[string]string{"namespace": q.namespace}, 1)
	// kubectl dra describe pod names the quota first.
	r := q.describe("three", "")
	want := fmt.Sprintf("DeviceQuota %s/gpus: class %s, devices: limit 2, used 2, this pod needs 1", q.namespace, q.class)
	if r.QuotaRefusal != want || !strings.HasPrefix(r.Conclusion, want+"; the devices fit otherwise") {
		t.Errorf("describe pod: quota refusal %q, conclusion %q; want the quota named, and the devices said to fit otherwise", r.QuotaRefusal, r.Conclusion)
	}
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
		return q.request(name, 1, fmt.Sprintf("device.attributes[%q].?memory.orValue(\"\") == %q", q.driver, "40Gi"))
	}
	q.pod("first", half("half"))
	q.pod("second", half("half"))
	q.waitForPodScheduled("first")
	q.waitForPodScheduled("second")
	q.pod("third", half("half"))
	q.waitForPodUnschedulable("third", "counter memory: limit 80Gi, used 80Gi, this pod needs 40Gi")
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
			// Both refused is a moment: the one whose refusal counted the
			// last round's claims is retried once their release arrives.
			return len(placed) == 2 || len(placed) == 1 && len(refused) == 1, nil
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

// The API refuses a limit that limits nothing, a negative quantity and a
// capacity that is no qualified name.
func TestDeviceQuotaValidation(t *testing.T) {
	q := newQuotaScenario(t, nil)
	for name, tc := range map[string]struct {
		amounts v1alpha1.DeviceAmounts
		want    string
	}{
		"nothing":  {want: "a limit must limit devices, counters or capacity"},
		"negative": {amounts: v1alpha1.DeviceAmounts{Counters: map[string]resource.Quantity{"memory": resource.MustParse("-1Gi")}}, want: "counters.memory"},
		"bad-name": {amounts: v1alpha1.DeviceAmounts{Capacity: map[resourceapi.QualifiedName]resource.Quantity{"not a name!": resource.MustParse("1Gi")}}, want: "capacity names are qualified names"},
	} {
		_, err := q.quotas.Create(q.ctx, &v1alpha1.DeviceQuota{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.DeviceQuotaSpec{Limits: []v1alpha1.DeviceClassLimit{{DeviceClassName: q.class, DeviceAmounts: tc.amounts}}}}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused with %q", name, err, tc.want)
		}
	}
}

// Preemption stays inside quota: a pod its quota would refuse even with
// its own namespace's lower-priority pods gone does not preempt another
// namespace's pods; once its quota is raised, it preempts as any pod does.
func TestDeviceQuotaPreemptionStaysInside(t *testing.T) {
	q := newQuotaScenario(t, nil)
	q.node("a", gpus(2, "a100")...)
	q.limit("one", devices(1))
	high := q.priorityClass("high", 2000)
	// The quota's one GPU, held by a pod preemption may not take.
	q.addClaimFor("mine", q.request("gpu", 1))
	q.addPodWith("mine", schedulerName, fromClaim("mine"), withPriorityClass(high))
	q.waitForPodScheduled("mine")
	// The other GPU, held by another namespace's pod of low priority.
	other := q.heldElsewhere("theirs", 10)

	urgent := q.priorityClass("urgent", 1000)
	q.addClaimFor("urgent", q.request("gpu", 1))
	q.addPodWith("urgent", schedulerName, fromClaim("urgent"), withPriorityClass(urgent))
	q.waitForPodUnschedulable("urgent", "preemption would not help: DeviceQuota "+q.namespace+"/one", "limit 1, used 1, this pod needs 1")
	if pod := other.getPod("theirs"); pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" {
		t.Fatalf("the other namespace's pod was preempted for a pod its quota refuses: %s", describeScheduling(pod))
	}
	// Raised, the quota lets the pod preempt the other namespace's pod.
	q.limit("one", devices(2))
	err := wait.PollUntilContextTimeout(q.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := env.client.CoreV1().Pods(other.namespace).Get(ctx, "theirs", metav1.GetOptions{})
		return err != nil || pod.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("with the quota raised, the pod did not preempt: %s", describeScheduling(q.getPod("urgent")))
	}
}

// heldElsewhere places, in a namespace of its own, a pod of the priority
// whose claim takes one device of the scenario's class, and returns that
// namespace's scenario.
func (q *quotaScenario) heldElsewhere(name string, priority int32) *scenario {
	q.t.Helper()
	other := newScenario(q.t, nil)
	if _, err := env.client.ResourceV1().ResourceClaims(other.namespace).Create(q.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{q.request("gpu", 1)}}},
	}, metav1.CreateOptions{}); err != nil {
		q.t.Fatal(err)
	}
	other.addPodWith(name, schedulerName, fromClaim(name), withPriorityClass(other.priorityClass("low", priority)))
	other.waitForPodScheduled(name)
	return other
}

// A randomized soak: three namespaces with random quotas (devices and
// memory counters, raised and lowered between waves) share three nodes of
// whole GPUs and partitionable ones; each wave creates pods asking for one
// or two GPUs, a half, or two GPUs or else a half, then deletes some. The
// invariant, read from the API after every wave: no namespace's allocated
// usage went up past a limit of its quota (a lowered limit may leave usage
// above it, but then it does not grow).
func TestDeviceQuotaSoak(t *testing.T) {
	const waves, podsPerWave = 12, 8
	rng := rand.New(rand.NewPCG(7, 7))
	tenants := []*quotaScenario{newQuotaScenario(t, nil)}
	w := tenants[0]
	for range 2 {
		s := newScenario(t, nil)
		client, err := versioned.NewForConfig(env.cp.Admin)
		if err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, &quotaScenario{why: &why{scenario: s, driver: w.driver, class: w.class}, quotas: client.DrascopeV1alpha1().DeviceQuotas(s.namespace)})
	}
	for _, name := range []string{"a", "b", "c"} {
		node := w.addNode(name, 0)
		w.publishSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: w.driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node + "-gpus", Generation: 1, ResourceSliceCount: 1},
			Devices: gpus(4, "a100")}})
		w.partitionable(node)
	}
	type limits struct{ devices, memoryGi int64 }
	current := map[string]limits{}
	setQuotas := func() {
		for _, q := range tenants {
			l := limits{devices: 1 + rng.Int64N(5), memoryGi: 40 * rng.Int64N(4)}
			current[q.namespace] = l
			q.limit("soak", v1alpha1.DeviceAmounts{Devices: ptr.To(l.devices),
				Counters: map[string]resource.Quantity{"memory": resource.MustParse(fmt.Sprintf("%dGi", l.memoryGi))}})
		}
	}
	usage := func(namespace string) limits {
		claims, err := env.client.ResourceV1().ResourceClaims(namespace).List(w.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var u limits
		for _, claim := range claims.Items {
			if claim.Status.Allocation == nil {
				continue
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				u.devices++
				if strings.HasPrefix(r.Device, "half-") {
					u.memoryGi += 40
				} else if r.Device == "whole" {
					u.memoryGi += 80
				}
			}
		}
		return u
	}
	half := fmt.Sprintf("device.attributes[%q].?memory.orValue(\"\") == %q", w.driver, "40Gi")
	whole := fmt.Sprintf("device.attributes[%q].?memory.orValue(\"\") == \"\"", w.driver)
	asks := []func(q *quotaScenario) []resourceapi.DeviceRequest{
		func(q *quotaScenario) []resourceapi.DeviceRequest {
			return []resourceapi.DeviceRequest{q.request("gpu", 1, whole)}
		},
		func(q *quotaScenario) []resourceapi.DeviceRequest {
			return []resourceapi.DeviceRequest{q.request("gpu", 2, whole)}
		},
		func(q *quotaScenario) []resourceapi.DeviceRequest {
			return []resourceapi.DeviceRequest{q.request("gpu", 1, half)}
		},
		func(q *quotaScenario) []resourceapi.DeviceRequest {
			return []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "two", DeviceClassName: q.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: whole}}}},
				{Name: "half", DeviceClassName: q.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: half}}}},
			}}}
		},
	}
	live := map[*quotaScenario][]string{}
	placed, refused := 0, 0
	setQuotas()
	for wave := range waves {
		before := map[string]limits{}
		for _, q := range tenants {
			before[q.namespace] = usage(q.namespace)
		}
		var created []struct {
			q    *quotaScenario
			name string
		}
		for i := range podsPerWave {
			q := tenants[rng.IntN(len(tenants))]
			name := fmt.Sprintf("w%d-%d", wave, i)
			q.pod(name, asks[rng.IntN(len(asks))](q)...)
			created = append(created, struct {
				q    *quotaScenario
				name string
			}{q, name})
		}
		for _, c := range created {
			pod := c.q.waitForPodOutcome(c.name)
			if pod.Spec.NodeName != "" {
				placed++
				live[c.q] = append(live[c.q], c.name)
			} else {
				refused++
			}
		}
		for _, q := range tenants {
			l, u, b := current[q.namespace], usage(q.namespace), before[q.namespace]
			if u.devices > l.devices && u.devices > b.devices || u.memoryGi > l.memoryGi && u.memoryGi > b.memoryGi {
				t.Fatalf("wave %d, namespace %s: usage %+v went past the limits %+v (it was %+v before the wave)", wave, q.namespace, u, l, b)
			}
		}
		// Some pods finish; the pods still pending are deleted with
		// them, so that each wave starts from bound pods only.
		for _, c := range created {
			if !slices.Contains(live[c.q], c.name) {
				c.q.gone(c.name)
			}
		}
		for q, names := range live {
			var kept []string
			for _, name := range names {
				if rng.IntN(2) == 0 {
					q.gone(name)
				} else {
					kept = append(kept, name)
				}
			}
			live[q] = kept
		}
		setQuotas()
	}
	t.Logf("%d waves: %d pods placed, %d refused; no namespace's usage went past its quota", waves, placed, refused)
	if placed < 20 || refused < 10 {
		t.Errorf("%d placed, %d refused: the soak tests too little of one side", placed, refused)
	}
}

// allocationMode All counts what the allocator chose: every matching
// device of the node.
func TestDeviceQuotaCountsAllocationModeAll(t *testing.T) {
	q := newQuotaScenario(t, nil)
	q.node("a", gpus(4, "a100")...)
	q.limit("gpus", devices(3))
	all := q.request("gpu", 0)
	all.Exactly.AllocationMode, all.Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
	q.pod("all", all)
	q.waitForPodUnschedulable("all", "devices: limit 3, used 0, this pod needs 4")
	q.limit("gpus", devices(4))
	q.waitForPodScheduled("all")
}

// A gang whose members together go over the quota places none of them,
// and places all once the quota is raised.
func TestDeviceQuotaGangAllOrNothing(t *testing.T) {
	q := newQuotaScenario(t, nil)
	node := q.node("a", gpus(2*gangSize, "a100")...)
	q.limit("gpus", devices(gangSize-1))
	q.createClaimTemplate("gpu", resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{q.request("gpu", 1)}}})
	q.addPodGroup("gang", gangSize)
	q.addGangPods("gang", schedulerName, fromTemplate("gpu"), []string{node})
	q.waitForGangUnschedulable()
	for i := range gangSize {
		if pod := q.getPod(gangPodName(i)); pod.Spec.NodeName != "" {
			t.Fatalf("member %s was bound although the gang goes over its quota", pod.Name)
		}
	}
	q.limit("gpus", devices(gangSize))
	q.waitForGangScheduled()
}

// firstAvailable is a prioritized list of the subrequests, each of one
// device of its class and selector.
func firstAvailable(name string, alternatives ...resourceapi.DeviceSubRequest) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, FirstAvailable: alternatives}
}

func alternative(name, class, selector string) resourceapi.DeviceSubRequest {
	return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}}
}

// chosen waits until the claim is allocated and returns the requests its
// results name.
func (q *quotaScenario) chosen(claim string) []string {
	q.t.Helper()
	var requests []string
	err := wait.PollUntilContextTimeout(q.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		c, err := env.client.ResourceV1().ResourceClaims(q.namespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil {
			return false, err
		}
		requests = nil
		for _, r := range c.Status.Allocation.Devices.Results {
			requests = append(requests, r.Request)
		}
		return true, nil
	})
	if err != nil {
		q.t.Fatalf("claim %s: not allocated: %v", claim, err)
	}
	return requests
}

// A prioritized list whose first alternative's class has no device left
// in the quota is handed its next one, of another class, which the quota
// does not limit: the allocator never sees the devices it could not take.
// A pod that asks the full class without alternative is still refused
// with the limit named, and is placed once the quota is raised.
func TestDeviceQuotaSteersFirstAvailableByClass(t *testing.T) {
	q := newQuotaScenario(t, nil)
	small := q.class + "-t4"
	t4 := fmt.Sprintf("device.driver == %q && device.attributes[%q].model == \"t4\"", q.driver, q.driver)
	if _, err := env.client.ResourceV1().DeviceClasses().Create(q.ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: small},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: t4}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.ResourceV1().DeviceClasses().Delete(context.Background(), small, metav1.DeleteOptions{})
	})
	devices := gpus(3, "a100")
	for _, d := range gpus(2, "t4") {
		d.Name = strings.Replace(d.Name, "gpu", "t4", 1)
		devices = append(devices, d)
	}
	q.node("a", devices...)
	a100 := fmt.Sprintf("device.attributes[%q].model == \"a100\"", q.driver)
	q.limit("a100s", v1alpha1.DeviceAmounts{Devices: ptr.To[int64](1)})
	q.pod("first", q.request("gpu", 1, a100))
	q.waitForPodScheduled("first")
	q.pod("second", firstAvailable("gpu", alternative("big", q.class, a100), alternative("small", small, "true")))
	q.pod("third", q.request("gpu", 1, a100))
	q.waitForPodScheduled("second")
	if got := q.chosen("second"); !slices.Equal(got, []string{"gpu/small"}) {
		t.Errorf("second pod: allocated %v, want the quota's way, gpu/small", got)
	}
	q.waitForPodUnschedulable("third", fmt.Sprintf("DeviceQuota %s/a100s: class %s, devices: limit 1, used 1, this pod needs 1", q.namespace, q.class))
	q.limit("a100s", v1alpha1.DeviceAmounts{Devices: ptr.To[int64](2)})
	q.waitForPodScheduled("third")
}

// Partitions by counter: with 40Gi of an 80Gi memory limit used, a pod
// that prefers a whole 80Gi GPU and else takes a 40Gi half gets the half.
// With the limit reached, the next such pod is refused after allocation,
// with what it needs; once a half is released it is steered to a half. A
// pod that asks only a whole GPU while 40Gi are left is shown none, and
// says which limit hid them.
func TestDeviceQuotaSteersFirstAvailableByCounter(t *testing.T) {
	q := newQuotaScenario(t, nil)
	for _, name := range []string{"a", "b"} {
		q.partitionable(q.addNode(name, 0))
	}
	q.limit("memory", v1alpha1.DeviceAmounts{Counters: map[string]resource.Quantity{"memory": resource.MustParse("80Gi")}})
	memory := func(gi string) string {
		return fmt.Sprintf("device.attributes[%q].?memory.orValue(\"\") == %q", q.driver, gi)
	}
	q.pod("first", q.request("half", 1, memory("40Gi")))
	q.waitForPodScheduled("first")
	prefersWhole := firstAvailable("gpu", alternative("whole", q.class, memory("80Gi")), alternative("half", q.class, memory("40Gi")))
	q.pod("second", prefersWhole)
	q.waitForPodScheduled("second")
	if got := q.chosen("second"); !slices.Equal(got, []string{"gpu/half"}) {
		t.Errorf("second pod: allocated %v, want the half that fits the quota", got)
	}
	q.pod("third", prefersWhole)
	q.waitForPodUnschedulable("third", fmt.Sprintf("DeviceQuota %s/memory: class %s, counter memory: limit 80Gi, used 80Gi, this pod needs 80Gi", q.namespace, q.class))
	q.gone("first")
	q.waitForPodScheduled("third")
	if got := q.chosen("third"); !slices.Equal(got, []string{"gpu/half"}) {
		t.Errorf("third pod: allocated %v, want a half", got)
	}
	q.gone("second")
	q.pod("whole", q.request("gpu", 1, memory("80Gi")))
	q.waitForPodUnschedulable("whole", fmt.Sprintf("devices were not offered that a DeviceQuota could not take (DeviceQuota %s/memory: class %s, counter memory: limit 80Gi, used 40Gi)", q.namespace, q.class))
}

// Preemption chooses its victims inside the quota: of two pods of lower
// priority on the node, one of the pod's own namespace at its quota and
// one of another namespace, it evicts its own namespace's, though
// DefaultPreemption would spare the one of higher priority (its own
// namespace's) first and evict the other.
func TestDeviceQuotaPreemptionChoosesVictimsInside(t *testing.T) {
	q := newQuotaScenario(t, nil)
	q.node("a", gpus(2, "a100")...)
	q.limit("one", devices(1))
	q.addClaimFor("mine", q.request("gpu", 1))
	q.addPodWith("mine", schedulerName, fromClaim("mine"), withPriorityClass(q.priorityClass("middle", 20)))
	q.waitForPodScheduled("mine")
	other := q.heldElsewhere("theirs", 10)

	q.addClaimFor("urgent", q.request("gpu", 1))
	q.addPodWith("urgent", schedulerName, fromClaim("urgent"), withPriorityClass(q.priorityClass("urgent", 1000)))
	err := wait.PollUntilContextTimeout(q.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := env.client.CoreV1().Pods(q.namespace).Get(ctx, "mine", metav1.GetOptions{})
		return err != nil || pod.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("the pod's own namespace's pod was not preempted: %s", describeScheduling(q.getPod("urgent")))
	}
	if pod := other.getPod("theirs"); pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" {
		t.Fatalf("the other namespace's pod was preempted: %s", describeScheduling(pod))
	}
}
