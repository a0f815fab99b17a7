package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/drausage"
	drahealth "github.com/drascope/drascope/pkg/health"
)

// How long a scenario waits for the scheduler to act. Generous for a loaded
// 2-core CI machine; a passing run takes a fraction of it.
const waitTimeout = 60 * time.Second

// scenario is one test's corner of the shared cluster: a namespace of its own
// and nodes and pools named after it. Everything it creates is removed when
// the test ends, after the double-allocation invariant has been checked.
type scenario struct {
	t         *testing.T
	ctx       context.Context
	namespace string
	nodes     []string
	slices    []string
	pools     []drausage.PoolID
}

func newScenario(t *testing.T, namespaceLabels map[string]string) *scenario {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	// Unique per run: without a namespace controller, namespaces never go away.
	prefix := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(strings.TrimPrefix(t.Name(), "Test")))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	name := names.SimpleNameGenerator.GenerateName(strings.TrimRight(prefix, "-") + "-")
	s := &scenario{t: t, ctx: ctx, namespace: name}
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: namespaceLabels},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	// The ServiceAccount admission plugin needs it; no controller makes it here.
	if _, err := env.client.CoreV1().ServiceAccounts(name).Create(ctx, &v1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/default: %v", name, err)
	}
	t.Cleanup(s.cleanUp)
	// Registered last so it runs first, while everything still exists.
	t.Cleanup(s.checkNoDeviceAllocatedTwice)
	return s
}

func (s *scenario) cleanUp() {
	ctx := context.Background()
	// Without a kubelet, only a zero grace period deletes a bound pod.
	_ = env.client.CoreV1().Pods(s.namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	for _, slice := range s.slices {
		_ = env.client.ResourceV1().ResourceSlices().Delete(ctx, slice, metav1.DeleteOptions{})
	}
	for _, node := range s.nodes {
		_ = env.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	}
	s.waitUntilTheSchedulerSeesThePoolsGone(ctx)
}

// waitUntilTheSchedulerSeesThePoolsGone waits until the in-process
// scheduler's informers delivered the deletion of the scenario's slices.
// After a kube-apiserver restart, client-go's reflectors reconnect with a
// backoff that grows to 30s and resets only after two quiet minutes; the
// next test's pods were then placed on this test's deleted devices
// (TestAPIServerRestartMidBurst run twice in a row: 80 pods bound on 64
// GPUs). A scheduler that never catches up is logged, not failed here: a
// stopped in-process scheduler's cache never does.
func (s *scenario) waitUntilTheSchedulerSeesThePoolsGone(ctx context.Context) {
	if env.runtime == nil || env.stopScheduler == nil || len(s.pools) == 0 {
		// No in-process scheduler runs now (restartScheduler's binaries
		// do): the one that starts next lists what exists.
		return
	}
	var left []drausage.PoolID
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		left = left[:0]
		pools := env.runtime.Pools()
		for _, pool := range s.pools {
			if pools != nil && pools.Get(pool) != nil {
				left = append(left, pool)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		s.t.Logf("the in-process scheduler still has %d of the test's pools after %s: %v", len(left), waitTimeout, left)
	}
}

func sliceName(node string) string { return node + "-" + strings.ReplaceAll(driverName, ".", "-") }

// addNode creates a Ready node and a ResourceSlice publishing gpus devices of
// driver gpu.example.com in a pool named after the node.
func (s *scenario) addNode(suffix string, gpus int) string {
	s.t.Helper()
	name := s.addLabelledNode(suffix, nil)
	if gpus > 0 {
		s.addSlice(sliceName(name), resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}, &name, gpuNames(0, gpus)...)
	}
	return name
}

// addLabelledNode creates a Ready node with the labels (and its hostname
// label), named after the scenario and the suffix.
func (s *scenario) addLabelledNode(suffix string, labels map[string]string) string {
	s.t.Helper()
	name := s.namespace + "-" + suffix
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	for k, v := range labels {
		node.Labels[k] = v
	}
	node, err := env.client.CoreV1().Nodes().Create(s.ctx, node, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("creating node %s: %v", name, err)
	}
	s.nodes = append(s.nodes, name)
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("8"),
		v1.ResourceMemory: resource.MustParse("32Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status = v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
	}
	if _, err := env.client.CoreV1().Nodes().UpdateStatus(s.ctx, node, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("setting status of node %s: %v", name, err)
	}
	return name
}

func gpuNames(from, to int) []string {
	var names []string
	for i := from; i < to; i++ {
		names = append(names, fmt.Sprintf("gpu-%d", i))
	}
	return names
}

// addSlice publishes devices of driver gpu.example.com in a slice; it is
// deleted when the test ends.
func (s *scenario) addSlice(name string, pool resourceapi.ResourcePool, node *string, devices ...string) *resourceapi.ResourceSlice {
	s.t.Helper()
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceSliceSpec{Driver: driverName, Pool: pool, NodeName: node},
	}
	if node == nil {
		slice.Spec.AllNodes = ptr.To(true)
	}
	for _, d := range devices {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s.publishSlice(slice)
}

// publishSlice creates a slice; it is deleted when the test ends.
func (s *scenario) publishSlice(slice *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	s.t.Helper()
	created, err := env.client.ResourceV1().ResourceSlices().Create(s.ctx, slice, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("creating ResourceSlice %s: %v", slice.Name, err)
	}
	s.slices = append(s.slices, slice.Name)
	s.pools = append(s.pools, drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name})
	return created
}

// addPartitionablePool publishes a GPU of 80Gi as a counter set, and three
// devices that consume it: "whole" (80Gi) and "half-a", "half-b" (40Gi
// each), each with the attribute partition=<its name>, on node (or on
// every node when nil). taints are put on the devices they name.
func (s *scenario) addPartitionablePool(suffix string, node *string, taints ...map[string]resourceapi.DeviceTaint) string {
	s.t.Helper()
	pool := s.namespace + "-" + suffix
	spec := resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 2}
	slice := func(name string) *resourceapi.ResourceSlice {
		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       resourceapi.ResourceSliceSpec{Driver: driverName, Pool: spec, NodeName: node},
		}
		if node == nil {
			slice.Spec.AllNodes = ptr.To(true)
		}
		return slice
	}
	counters := slice(pool + "-counters")
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}}
	s.publishSlice(counters)
	devices := slice(pool + "-devices")
	for _, p := range []struct{ name, memory string }{{"whole", "80Gi"}, {"half-a", "40Gi"}, {"half-b", "40Gi"}} {
		device := resourceapi.Device{
			Name:       p.name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"partition": {StringValue: ptr.To(p.name)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(p.memory)}},
			}},
		}
		for _, t := range taints {
			if taint, ok := t[p.name]; ok {
				device.Taints = append(device.Taints, taint)
			}
		}
		devices.Spec.Devices = append(devices.Spec.Devices, device)
	}
	s.publishSlice(devices)
	return pool
}

// partitionRequest asks for the partition of that name, with admin access
// or not.
func partitionRequest(name, partition string, adminAccess bool) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: deviceClassName,
		AdminAccess:     ptr.To(adminAccess),
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			// Plain GPUs have no partition attribute: .? keeps them
			// from being an error.
			Expression: fmt.Sprintf("device.attributes[%q].?partition.orValue(\"\") == %q", driverName, partition),
		}}},
	}}
}

// addClaimFor creates a claim with these requests.
func (s *scenario) addClaimFor(name string, requests ...resourceapi.DeviceRequest) {
	s.t.Helper()
	if _, err := env.client.ResourceV1().ResourceClaims(s.namespace).Create(s.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ResourceClaim %s/%s: %v", s.namespace, name, err)
	}
}

func gpuClaimSpec(adminAccess bool) resourceapi.ResourceClaimSpec {
	request := &resourceapi.ExactDeviceRequest{DeviceClassName: deviceClassName}
	if adminAccess {
		request.AdminAccess = ptr.To(true)
		// Monitoring must reach devices drascope taints Unhealthy
		// (deviceHealth.policy Taint): upstream applies taints to admin
		// access too.
		request.Tolerations = []resourceapi.DeviceToleration{{
			Key: drahealth.TaintKey, Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule,
		}}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: request}},
	}}
}

func (s *scenario) addClaimTemplate(name string, adminAccess bool) {
	s.t.Helper()
	s.createClaimTemplate(name, gpuClaimSpec(adminAccess))
}

// createClaimTemplate creates a claim template with this spec.
func (s *scenario) createClaimTemplate(name string, spec resourceapi.ResourceClaimSpec) {
	s.t.Helper()
	if _, err := env.client.ResourceV1().ResourceClaimTemplates(s.namespace).Create(s.ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ResourceClaimTemplate %s/%s: %v", s.namespace, name, err)
	}
}

func (s *scenario) addClaim(name string, adminAccess bool) {
	s.t.Helper()
	s.addClaimFor(name, gpuClaimSpec(adminAccess).Devices.Requests...)
}

// podClaimSource names either a template or an existing claim for the pod's
// one claim entry, "gpu".
type podClaimSource struct {
	template string
	claim    string
}

func fromTemplate(name string) podClaimSource { return podClaimSource{template: name} }
func fromClaim(name string) podClaimSource    { return podClaimSource{claim: name} }

func (s *scenario) addPod(name, scheduler string, source podClaimSource) {
	s.t.Helper()
	s.addPodWith(name, scheduler, source)
}

// addPodWith is addPod with the pod changed by each change, in order,
// before it is created.
func (s *scenario) addPodWith(name, scheduler string, source podClaimSource, changes ...func(*v1.Pod)) {
	s.t.Helper()
	podClaim := v1.PodResourceClaim{Name: "gpu"}
	if source.template != "" {
		podClaim.ResourceClaimTemplateName = &source.template
	} else {
		podClaim.ResourceClaimName = &source.claim
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			SchedulerName:  scheduler,
			ResourceClaims: []v1.PodResourceClaim{podClaim},
			Containers: []v1.Container{{
				Name:      "app",
				Image:     "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	for _, change := range changes {
		change(pod)
	}
	s.createPod(pod)
}

// createPod creates the pod in the scenario's namespace. The Priority
// admission plugin reads PriorityClasses from an informer: one created a
// moment ago may not be there yet, and the create is retried.
func (s *scenario) createPod(pod *v1.Pod) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := env.client.CoreV1().Pods(s.namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name") {
			return false, nil
		}
		return true, err
	})
	if err != nil {
		s.t.Fatalf("creating pod %s/%s: %v", s.namespace, pod.Name, err)
	}
}

func (s *scenario) getPod(name string) *v1.Pod {
	s.t.Helper()
	pod, err := env.client.CoreV1().Pods(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("getting pod %s/%s: %v", s.namespace, name, err)
	}
	return pod
}

func scheduledCondition(pod *v1.Pod) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func describeScheduling(pod *v1.Pod) string {
	if pod.Spec.NodeName != "" {
		return "bound to " + pod.Spec.NodeName
	}
	if c := scheduledCondition(pod); c != nil {
		return fmt.Sprintf("PodScheduled=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return "not yet attempted"
}

// waitForPodScheduled waits until the pod is bound and returns it.
func (s *scenario) waitForPodScheduled(name string) *v1.Pod {
	s.t.Helper()
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod = s.getPod(name)
		return pod.Spec.NodeName != "", nil
	})
	if err != nil {
		s.t.Fatalf("pod %s/%s was not scheduled: %s (scheduler log: %s)", s.namespace, name, describeScheduling(pod), env.schedulerLog)
	}
	return pod
}

// waitForPodUnschedulable waits until the scheduler has marked the pod
// unschedulable with a message containing every one of want.
func (s *scenario) waitForPodUnschedulable(name string, want ...string) *v1.Pod {
	s.t.Helper()
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pod = s.getPod(name)
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("pod was bound to %s", pod.Spec.NodeName)
		}
		c := scheduledCondition(pod)
		if c == nil || c.Status != v1.ConditionFalse || c.Reason != v1.PodReasonUnschedulable {
			return false, nil
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.t.Fatalf("pod %s/%s: want unschedulable with a message containing %q, got: %s (%v)", s.namespace, name, want, describeScheduling(pod), err)
	}
	return pod
}

// podClaim returns the claim behind the pod's "gpu" entry.
func (s *scenario) podClaim(pod *v1.Pod) *resourceapi.ResourceClaim {
	s.t.Helper()
	name := ""
	for _, c := range pod.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			name = *c.ResourceClaimName
		}
	}
	for _, status := range pod.Status.ResourceClaimStatuses {
		if status.ResourceClaimName != nil {
			name = *status.ResourceClaimName
		}
	}
	if name == "" {
		s.t.Fatalf("pod %s/%s has no resolved claim name", pod.Namespace, pod.Name)
	}
	return s.getClaim(name)
}

func (s *scenario) getClaim(name string) *resourceapi.ResourceClaim {
	s.t.Helper()
	claim, err := env.client.ResourceV1().ResourceClaims(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("getting claim %s/%s: %v", s.namespace, name, err)
	}
	return claim
}

// allocatedDevice returns the one device result of an allocated claim.
func (s *scenario) allocatedDevice(claim *resourceapi.ResourceClaim) resourceapi.DeviceRequestAllocationResult {
	s.t.Helper()
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		s.t.Fatalf("claim %s/%s: want one allocated device, got allocation %+v", claim.Namespace, claim.Name, claim.Status.Allocation)
	}
	return claim.Status.Allocation.Devices.Results[0]
}

func (s *scenario) setNamespaceLabel(value *string) {
	s.t.Helper()
	ns, err := env.client.CoreV1().Namespaces().Get(s.ctx, s.namespace, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	if value == nil {
		delete(ns.Labels, resourceapi.DRAAdminNamespaceLabelKey)
	} else {
		ns.Labels[resourceapi.DRAAdminNamespaceLabelKey] = *value
	}
	if _, err := env.client.CoreV1().Namespaces().Update(s.ctx, ns, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("updating labels of namespace %s: %v", s.namespace, err)
	}
}

var adminNamespaceLabels = map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "true"}

// checkNoDeviceAllocatedTwice is the invariant every scenario ends with: over
// all claims in the cluster, no device is held by more claims than it allows
// (admin access holds nothing; shares of a device that allows multiple
// allocations are fine), and no capacity or shared counter is over-consumed.
// It is drascope's own counting rule, the conflicts of pkg/drausage, applied
// to what the apiserver stores.
func (s *scenario) checkNoDeviceAllocatedTwice() {
	usage, err := usageFromAPI(context.Background(), "")
	if err != nil {
		s.t.Errorf("counting for the invariant check: %v", err)
		return
	}
	for _, pool := range usage {
		for _, c := range pool.Conflicts {
			s.t.Errorf("%s; claims: %v", c.Message, c.Claims)
		}
	}
}

// usageFromAPI counts every pool from the apiserver's slices and the
// claims of namespace (every namespace when ""), by pool name.
func usageFromAPI(ctx context.Context, namespace string) (map[string]drausage.PoolUsage, error) {
	slices, err := env.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing slices: %w", err)
	}
	claims, err := env.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	slicePointers := make([]*resourceapi.ResourceSlice, 0, len(slices.Items))
	for i := range slices.Items {
		slicePointers = append(slicePointers, &slices.Items[i])
	}
	claimPointers := make([]*resourceapi.ResourceClaim, 0, len(claims.Items))
	for i := range claims.Items {
		claimPointers = append(claimPointers, &claims.Items[i])
	}
	byPool := map[string]drausage.PoolUsage{}
	for _, usage := range drausage.ComputePoolUsage(slicePointers, claimPointers, drausage.Options{}) {
		byPool[usage.Pool] = usage
	}
	return byPool, nil
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// The message upstream's allocator gives when no device is left; drascope
// passes it through unchanged.
const noDeviceLeft = "cannot allocate all claims"
