package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/whypending"
)

// The tests of `kubectl dra describe pod`: one per cause that keeps a pod
// pending, each on devices of a driver of its own (so that other tests'
// devices never count), with the scheduler's own refusal seen first. Each
// asserts the request named, the number, and the cause.

// why is a scenario with a driver and a device class of its own.
type why struct {
	*scenario
	driver, class string
}

func newWhy(t *testing.T, labels map[string]string) *why {
	t.Helper()
	s := newScenario(t, labels)
	w := &why{scenario: s, driver: s.namespace + ".example.com", class: s.namespace}
	if _, err := env.client.ResourceV1().DeviceClasses().Create(s.ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: w.class},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", w.driver)},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.ResourceV1().DeviceClasses().Delete(context.Background(), w.class, metav1.DeleteOptions{})
	})
	return w
}

// node adds a node with a pool of the devices, named after the node.
func (w *why) node(suffix string, devices ...resourceapi.Device) string {
	w.t.Helper()
	name := w.addNode(suffix, 0)
	w.publishSlice(&resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-devices"},
		Spec: resourceapi.ResourceSliceSpec{Driver: w.driver, NodeName: &name,
			Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}, Devices: devices},
	})
	return name
}

// gpus are n devices gpu-0.. with the model attribute.
func gpus(n int, model string) []resourceapi.Device {
	var out []resourceapi.Device
	for i := range n {
		out = append(out, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To(model)}}})
	}
	return out
}

// request asks for count devices of the scenario's class.
func (w *why) request(name string, count int64, selectors ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: w.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	for _, s := range selectors {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return r
}

// hold allocates a claim of the scenario to the node's device, as another
// pod's would be.
func (w *why) hold(claim, node, device string) {
	w.t.Helper()
	w.addClaimFor(claim, w.request("gpu", 1))
	w.allocate(claim, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: w.driver, Pool: node, Device: device})
}

// pending creates a pod of the claim and waits until the scheduler refused
// it with a message holding each of want.
func (w *why) pending(pod, claim string, want ...string) {
	w.t.Helper()
	w.addPod(pod, schedulerName, fromClaim(claim))
	w.waitForPodUnschedulable(pod, want...)
}

// describe runs kubectl dra describe pod as text (logged) and as JSON, and
// returns the report; as is the user, "" the cluster admin.
func (w *why) describe(pod, as string) *whypending.Report {
	w.t.Helper()
	args := []string{"describe", "pod", pod, "-n", w.namespace}
	if as != "" {
		args = append(args, "--as", as)
	}
	var text, errOut string
	var err error
	// RBAC changes reach the authorizer through its informers: a user's
	// grants may take a moment.
	_ = wait.PollUntilContextTimeout(w.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		text, errOut, err = kubectlDRA(w.t, args...)
		return err == nil || as == "", nil
	})
	if err != nil {
		w.t.Fatalf("kubectl dra %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	w.t.Logf("kubectl dra %s\n%s", strings.Join(args, " "), text)
	out, _, err := kubectlDRA(w.t, append(args, "-o", "json")...)
	if err != nil {
		w.t.Fatal(err)
	}
	var r whypending.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		w.t.Fatalf("-o json is no PodDeviceReport: %v\n%s", err, out)
	}
	if r.APIVersion != whypending.APIVersion || r.Kind != whypending.Kind {
		w.t.Errorf("report %s %s, want %s %s", r.APIVersion, r.Kind, whypending.APIVersion, whypending.Kind)
	}
	if !strings.Contains(text, "Conclusion:") || !strings.Contains(text, r.Conclusion) {
		w.t.Errorf("the text does not end in the report's conclusion %q", r.Conclusion)
	}
	return &r
}

// verdict is the report's verdict of the claim's request.
func verdict(t *testing.T, r *whypending.Report, claim, request string) *whypending.Verdict {
	t.Helper()
	for _, c := range r.Claims {
		for _, q := range c.Requests {
			if c.Name == claim && q.Name == request && q.Verdict != nil {
				return q.Verdict
			}
		}
	}
	t.Fatalf("no verdict for claim %s, request %s in %+v", claim, request, r.Claims)
	return nil
}

func wantConclusion(t *testing.T, r *whypending.Report, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(r.Conclusion, w) {
			t.Errorf("conclusion %q does not say %q", r.Conclusion, w)
		}
	}
}

// A selector nothing matches: the request is named, and no node has a
// matching device.
func TestWhyPendingSelectorMatchesNothing(t *testing.T) {
	w := newWhy(t, nil)
	w.node("a", gpus(2, "a100")...)
	w.addClaimFor("train", w.request("gpu", 1, fmt.Sprintf("device.attributes[%q].model == %q", w.driver, "h100")))
	// The scheduler's own message names the claim and request.
	w.pending("train", "train", "claim "+w.namespace+"/train, request gpu (1 × "+w.class+"): no node has a matching device")
	r := w.describe("train", "")
	if v := verdict(t, r, "gpu", "gpu"); v.NodesWithMatching != 0 || v.Devices.Matching != 0 {
		t.Errorf("verdict %+v, want no matching device anywhere", v)
	}
	wantConclusion(t, r, "claim "+w.namespace+"/train, request gpu needs 1 × "+w.class, "no node has a matching device", "selectors")
	if r.SchedulerMessage == "" || !strings.Contains(r.SchedulerMessage, "cannot allocate all claims") {
		t.Errorf("scheduler message %q, want the scheduler's refusal", r.SchedulerMessage)
	}
}

// Enough devices exist, but others hold them: the counts say how many,
// where the most free are, and the closest node says what it lacks.
func TestWhyPendingDevicesAllocated(t *testing.T) {
	w := newWhy(t, nil)
	a, b := w.node("a", gpus(4, "a100")...), w.node("b", gpus(4, "a100")...)
	w.hold("a0", a, "gpu-0")
	w.hold("b0", b, "gpu-0")
	w.hold("b1", b, "gpu-1")
	w.addClaimFor("train", w.request("gpu", 4))
	w.pending("train", "train", "claim "+w.namespace+"/train, request gpu (4 × "+w.class+"): 2 nodes have matching devices, none has 4 free (most: 3, on 1 node)")
	r := w.describe("train", "")
	v := verdict(t, r, "gpu", "gpu")
	if v.NodesWithMatching != 2 || v.NodesWithEnough != 0 || v.MostFree != 3 || v.NodesWithMostFree != 1 || v.Devices.Allocated != 3 || v.Devices.Free != 5 {
		t.Errorf("verdict %+v, want 2 nodes matching, none with 4 free, at most 3 (on 1), 3 allocated, 5 free", v)
	}
	if len(r.Closest) == 0 || r.Closest[0].Node != a || !strings.Contains(strings.Join(r.Closest[0].Lacks, ";"), "gpu: 3 free of 4 needed (1 allocated)") {
		t.Errorf("closest %+v, want %s lacking one GPU", r.Closest, a)
	}
	wantConclusion(t, r, "request gpu needs 4 × "+w.class+" on one node", "2 nodes have matching devices, at most 3 free (on 1 node)", "3 allocated")
}

// Tainted devices, not tolerated: the taint is named.
func TestWhyPendingTainted(t *testing.T) {
	w := newWhy(t, nil)
	devices := gpus(2, "a100")
	for i := range devices {
		devices[i].Taints = []resourceapi.DeviceTaint{{Key: "maintenance", Value: "firmware", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	w.node("a", devices...)
	w.addClaimFor("train", w.request("gpu", 1))
	w.pending("train", "train", "cannot allocate all claims", "yet no node could allocate the claims")
	r := w.describe("train", "")
	if v := verdict(t, r, "gpu", "gpu"); v.Devices.Tainted != 2 || len(v.Taints) != 1 || v.Taints[0] != "maintenance=firmware:NoSchedule" {
		t.Errorf("verdict %+v, want 2 tainted by maintenance=firmware:NoSchedule", v)
	}
	wantConclusion(t, r, "2 tainted", "maintenance=firmware:NoSchedule")
}

// Partitions whose GPU is used whole: short of shared counters.
func TestWhyPendingCountersExhausted(t *testing.T) {
	w := newWhy(t, nil)
	node := w.addNode("a", 0)
	w.partitionable(node)
	w.hold("whole", node, "whole")
	w.addClaimFor("train", w.request("gpu", 1))
	w.pending("train", "train", "cannot allocate all claims", "yet no node could allocate the claims")
	r := w.describe("train", "")
	if v := verdict(t, r, "gpu", "gpu"); v.Devices.Matching != 3 || v.Devices.Allocated != 1 || v.Devices.CountersExhausted != 2 {
		t.Errorf("verdict %+v, want 1 allocated and 2 short of counters", v)
	}
	wantConclusion(t, r, "1 allocated", "2 short of shared counters")
}

// A shared GPU with too little memory left for the request.
func TestWhyPendingCapacityExhausted(t *testing.T) {
	w := newWhy(t, nil)
	node := w.node("a", resourceapi.Device{Name: "shared-0", AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}})
	memory := func(name, amount string) resourceapi.DeviceRequest {
		r := w.request(name, 1)
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(amount)}}
		return r
	}
	w.addClaimFor("big", memory("gpu", "60Gi"))
	w.allocate("big", resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: w.driver, Pool: node, Device: "shared-0",
		ShareID: ptr.To(types.UID("11111111-1111-1111-1111-111111111111")), ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("60Gi")}})
	w.addClaimFor("train", memory("gpu", "40Gi"))
	w.pending("train", "train", "cannot allocate all claims", "yet no node could allocate the claims")
	r := w.describe("train", "")
	if v := verdict(t, r, "gpu", "gpu"); v.Devices.CapacityExhausted != 1 || v.NodesWithEnough != 0 {
		t.Errorf("verdict %+v, want the shared GPU short of capacity", v)
	}
	wantConclusion(t, r, "1 short of capacity")
}

// Two requests that must share a model: each fits alone, the constraint
// does not.
func TestWhyPendingConstraint(t *testing.T) {
	w := newWhy(t, nil)
	w.node("a", append(gpus(1, "a100"), resourceapi.Device{Name: "gpu-1",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("h100")}}})...)
	attribute := resourceapi.FullyQualifiedName(w.driver + "/model")
	if _, err := env.client.ResourceV1().ResourceClaims(w.namespace).Create(w.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pair"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests:    []resourceapi.DeviceRequest{w.request("first", 1), w.request("second", 1)},
			Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: &attribute}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.pending("pair", "pair", "cannot allocate all claims", "yet no node could allocate the claims")
	r := w.describe("pair", "")
	if r.Fit == nil || r.Fit.Tried != 1 || r.Fit.Count != 0 || !r.Fit.ConstraintsFail {
		t.Errorf("fit %+v, want one node tried, none fitting, the constraint failing", r.Fit)
	}
	wantConclusion(t, r, "constraints")
	if len(r.Claims) != 1 || len(r.Claims[0].Constraints) != 1 || !strings.Contains(r.Claims[0].Constraints[0], "matchAttribute "+string(attribute)) {
		t.Errorf("claims %+v, want the constraint shown", r.Claims)
	}
}

// A prioritized list whose alternatives all fail.
func TestWhyPendingAlternativesAllFail(t *testing.T) {
	w := newWhy(t, nil)
	w.node("a", gpus(1, "a100")...)
	w.node("b", gpus(1, "a100")...)
	w.addClaimFor("train", resourceapi.DeviceRequest{Name: "gpus", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "four", DeviceClassName: w.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "two", DeviceClassName: w.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
	}})
	w.pending("train", "train", "cannot allocate all claims")
	r := w.describe("train", "")
	for _, alt := range []string{"gpus/four", "gpus/two"} {
		if v := verdict(t, r, "gpu", alt); v.NodesWithEnough != 0 || v.MostFree != 1 || v.NodesWithMostFree != 2 {
			t.Errorf("%s: verdict %+v, want at most 1 free, on 2 nodes", alt, v)
		}
	}
	wantConclusion(t, r, "request gpus/four (nor any of its 2 alternatives) needs 4 ×", "at most 1 free (on 2 nodes)")
}

// Admin access in a namespace that lost the label: the scheduler refuses
// it, and the conclusion says which label to add where.
func TestWhyPendingAdminAccessWithoutTheLabel(t *testing.T) {
	w := newWhy(t, adminNamespaceLabels)
	w.node("a", gpus(1, "a100")...)
	monitor := w.request("gpu", 1)
	monitor.Exactly.AdminAccess = ptr.To(true)
	w.addClaimFor("monitor", monitor)
	w.setNamespaceLabel(nil)
	w.pending("monitor", "monitor", resourceapi.DRAAdminNamespaceLabelKey)
	r := w.describe("monitor", "")
	wantConclusion(t, r, "claim "+w.namespace+"/monitor, request gpu", "admin access requires the label "+resourceapi.DRAAdminNamespaceLabelKey, "kubectl label namespace "+w.namespace)
}

// A tenant who may read the pod's namespace and the devices, not other
// namespaces' claims: devices others hold are counted from the
// ResourcePools, said so, and no other tenant is named.
func TestWhyPendingForATenant(t *testing.T) {
	w := newWhy(t, nil)
	a := w.node("a", gpus(2, "a100")...)
	other := newScenario(t, nil)
	if _, err := env.client.ResourceV1().ResourceClaims(other.namespace).Create(w.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "theirs"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{w.request("gpu", 1)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other.allocate("theirs", resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: w.driver, Pool: a, Device: "gpu-0"})
	w.addClaimFor("train", w.request("gpu", 2))
	w.pending("train", "train", "cannot allocate all claims")
	name, ok := v1alpha1.PlainName(w.driver, a)
	if !ok {
		t.Fatalf("pool %s of %s has no plain object name", a, w.driver)
	}
	w.waitForResourcePool(name, "1 of 2 allocated", summaryIs(2, 1, 1, 0))

	user := "tenant-" + w.namespace
	grantClusterRead(t, w.scenario, user,
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "deviceclasses"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"drascope.dev"}, Resources: []string{"resourcepools"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}})
	// In the pod's namespace: its pods, claims and events.
	if _, err := env.client.RbacV1().Roles(w.namespace).Create(w.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().RoleBindings(w.namespace).Create(w.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := w.describe("train", user)
	if v := verdict(t, r, "gpu", "gpu"); v.Devices.Allocated != 1 || v.Devices.Free != 1 || v.NodesWithEnough != 0 {
		t.Errorf("verdict %+v, want the device another tenant holds counted allocated, from the ResourcePool", v)
	}
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "counted from the ResourcePools") || !strings.Contains(notes, "listing Pods is not permitted") {
		t.Errorf("notes %q, want what RBAC hid said", r.Notes)
	}
	data, _ := json.Marshal(r)
	if strings.Contains(string(data), other.namespace) || strings.Contains(string(data), "theirs") {
		t.Errorf("the report names another tenant's namespace or claim:\n%s", data)
	}
}

// A GPU reported Unhealthy, withheld by the scheduler: the verdict counts
// it Unhealthy, from the health drascope-scheduler publishes.
func TestWhyPendingUnhealthy(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node, broken := s.gpuNodeWithPod("trainer", 1)
	pool := poolObjectName(t, node)
	s.reportHealth("trainer", health(node, broken, v1.ResourceHealthStatusUnhealthy, "ECC error count exceeded"))
	s.waitForResourcePool(pool, broken+" Allocated and Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		d := deviceStatus(rp, broken)
		return d.State == "Allocated" && d.Health == "Unhealthy"
	})
	s.deletePod("trainer")
	s.waitForResourcePool(pool, broken+" Unavailable because Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		return deviceStatus(rp, broken).Reason == "Unhealthy"
	})
	s.addPod("next", schedulerName, fromTemplate("gpu"))
	s.waitForWithheld("next", node, broken, "trainer", "ECC error count exceeded")
	w := &why{scenario: s, driver: driverName, class: deviceClassName}
	r := w.describe("next", "")
	if v := verdict(t, r, "gpu", "gpu"); v.Devices.Unhealthy != 1 || v.NodesWithEnough != 0 {
		t.Errorf("verdict %+v, want the GPU counted Unhealthy", v)
	}
	wantConclusion(t, r, "request gpu needs 1 × "+deviceClassName, "1 Unhealthy")
}

// partitionable publishes on node a GPU of 80Gi as a counter set and its
// partitions: "whole" (80Gi) and two halves (40Gi), with their memory as
// an attribute.
func (w *why) partitionable(node string) {
	w.t.Helper()
	spec := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	partition := func(name, memory string) resourceapi.Device {
		return resourceapi.Device{Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"memory": {StringValue: ptr.To(memory)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}}}}}
	}
	w.publishSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-counters"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: w.driver, Pool: spec, NodeName: &node,
		SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}},
	}})
	w.publishSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-partitions"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: w.driver, Pool: spec, NodeName: &node,
		Devices: []resourceapi.Device{partition("whole", "80Gi"), partition("half-a", "40Gi"), partition("half-b", "40Gi")},
	}})
}
