package draruntime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
)

// The client-go fake stands in for the apiserver here only as a source of
// informer events: these tests check how the runtime wires the caches to
// each other and to the scheduler, not anything the apiserver decides.

// handle is the part of a framework.Handle the runtime uses.
type handle struct {
	profile  string
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	recorder *events.FakeRecorder
	*activations
}

func newHandle(profile string, client kubernetes.Interface, factory informers.SharedInformerFactory) *handle {
	return &handle{profile: profile, client: client, factory: factory, recorder: events.NewFakeRecorder(10), activations: &activations{}}
}

func (h *handle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h *handle) ClientSet() kubernetes.Interface                        { return h.client }
func (h *handle) KubeConfig() *restclient.Config {
	return &restclient.Config{Host: "https://127.0.0.1:1"}
}
func (h *handle) EventRecorder() events.EventRecorderLogger { return h.recorder }
func (h *handle) ProfileName() string                       { return h.profile }

type activations struct {
	mu   sync.Mutex
	pods []map[string]*v1.Pod
}

func (a *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods = append(a.pods, pods)
}

func (a *activations) activated() []map[string]*v1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods
}

// defaults are the args a profile gets with nothing set, except that
// ResourcePools are not published: publishing is tested against a real
// apiserver (test/integration).
func defaults() *config.DRAScopeArgs {
	return &config.DRAScopeArgs{
		AdminAccess:  config.AdminAccessArgs{RequireNamespaceLabel: true},
		PoolStatus:   config.PoolStatusArgs{PublishResourcePools: false, MinPublishInterval: metav1.Duration{Duration: time.Second}, MaxWritesPerSecond: 5, MaxCreationsPerSecond: 50, MaxPublishDelay: metav1.Duration{Duration: 10 * time.Second}},
		DeviceHealth: config.DeviceHealthArgs{Policy: config.DeviceHealthAvoid, UnhealthyHoldTime: metav1.Duration{Duration: time.Hour}},
	}
}

func TestJoinChecksSchedulerWideArgs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	rt := New()
	t.Cleanup(func() {
		cancel()
		rt.Wait()
	})

	if rt.Pools() != nil || rt.Health() != nil || rt.Withholds() {
		t.Error("a runtime that has not started has caches, or withholds devices")
	}
	if err := rt.Join(ctx, newHandle("drascope-a", client, factory), defaults()); err != nil {
		t.Fatalf("first profile: %v", err)
	}
	if rt.Pools() == nil || rt.Health() == nil || !rt.Withholds() {
		t.Fatal("the started runtime lacks its caches, or does not withhold under policy Avoid")
	}
	pools := rt.Pools()

	perProfile := defaults()
	perProfile.AdminAccess.RequireNamespaceLabel = false
	if err := rt.Join(ctx, newHandle("drascope-b", client, factory), perProfile); err != nil {
		t.Errorf("a profile that differs only in per-profile args: %v", err)
	}

	conflicting := defaults()
	conflicting.PoolStatus.MaxWritesPerSecond = 10
	conflicting.DeviceHealth.Policy = config.DeviceHealthIgnore
	err := rt.Join(ctx, newHandle("drascope-c", client, factory), conflicting)
	if err == nil {
		t.Fatal("a profile with other scheduler-wide args joined")
	}
	for _, want := range []string{
		"profiles[drascope-c].pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: Invalid value: 10: differs from profiles[drascope-a].pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: 5",
		`profiles[drascope-c].pluginConfig[DRAScope].args.deviceHealth.policy: Invalid value: "Ignore": differs from profiles[drascope-a].pluginConfig[DRAScope].args.deviceHealth.policy: Avoid`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}

	otherScheduler := informers.NewSharedInformerFactory(client, 0)
	if err := rt.Join(ctx, newHandle("drascope-d", client, otherScheduler), defaults()); err == nil || !strings.Contains(err.Error(), "belongs to another scheduler") {
		t.Errorf("a profile of another scheduler: got %v, want a refusal", err)
	}
	if rt.Pools() != pools {
		t.Error("a later Join replaced the side cache")
	}
}

// startedRuntime joins a runtime for profile drascope-scheduler with args,
// on the fake's informers, and starts them; cancel stops it.
func startedRuntime(t *testing.T, args *config.DRAScopeArgs) (context.Context, context.CancelFunc, *fake.Clientset, informers.SharedInformerFactory, *handle, *Runtime) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	h := newHandle("drascope-scheduler", client, factory)
	rt := New()
	if err := rt.Join(ctx, h, args); err != nil {
		cancel()
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	return ctx, cancel, client, factory, h, rt
}

// TestRuntimeWiring follows one device through the runtime: a slice reaches
// the side cache, an Unhealthy report in pod status reaches the health
// cache, which withholds the device and makes the side cache count it
// unavailable, and a Healthy report retries the pods that waited for it.
// The per-pool gauges show the runtime's cache, until it stops.
func TestRuntimeWiring(t *testing.T) {
	ctx, cancel, client, factory, h, rt := startedRuntime(t, defaults())
	defer cancel()

	pool := drausage.PoolID{Driver: "gpu.example.com", Pool: "node-1"}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   pool.Driver,
			Pool:     resourceapi.ResourcePool{Name: pool.Pool, ResourceSliceCount: 1},
			NodeName: ptr.To("node-1"),
			Devices:  []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}},
		},
	}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the side cache to show the slice's 2 available devices", func() bool {
		snap := rt.Pools().Get(pool)
		return snap != nil && snap.Summary.Available == 2
	})

	// The report counts only from a pod that holds the device.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "trainer-gpu"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: pool.Driver, Pool: pool.Pool, Device: "gpu-0"},
			}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer", UID: "trainer-uid"}},
		},
	}
	if _, err := client.ResourceV1().ResourceClaims("training").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the claim in the informer cache", func() bool {
		_, err := factory.Resource().V1().ResourceClaims().Lister().ResourceClaims("training").Get("trainer-gpu")
		return err == nil
	})
	reporter := podReporting("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy)
	if _, err := client.CoreV1().Pods("training").Create(ctx, reporter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the health cache to have the report", func() bool {
		return len(rt.Health().Unhealthy()) == 1
	})
	// The pod is deleted and its claim released: the device is free, and
	// withheld.
	if err := client.CoreV1().Pods("training").Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceClaims("training").Delete(ctx, "trainer-gpu", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the side cache to count gpu-0 Unhealthy and unavailable", func() bool {
		snap := rt.Pools().Get(pool)
		return snap != nil && snap.Summary.Unavailable == 1 && snap.Summary.Available == 1
	})
	if unhealthy := rt.Health().Unhealthy(); len(unhealthy) != 1 || unhealthy[0].Device != (health.Device{Driver: pool.Driver, Pool: pool.Pool, Name: "gpu-0"}) {
		t.Errorf("Unhealthy devices = %+v, want gpu-0 alone", unhealthy)
	}
	if got := gauge(t, "drascope_resourcepool_devices", map[string]string{"pool": "node-1", "state": "Unavailable"}); got != 1 {
		t.Errorf("drascope_resourcepool_devices{pool=node-1,state=Unavailable} = %v, want 1", got)
	}

	waiting := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "waiting", UID: "waiting-uid"}}
	rt.RetryWhenDevicesFree(waiting)
	if len(h.activated()) != 0 {
		t.Fatal("a pod was retried before any device recovered")
	}
	// A monitor with admin access holds the device and reports it Healthy.
	monitorClaim := claim.DeepCopy()
	monitorClaim.Name, monitorClaim.Status.ReservedFor[0].UID = "monitor-gpu", "monitor-uid"
	monitorClaim.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
	if _, err := client.ResourceV1().ResourceClaims("training").Create(ctx, monitorClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the monitor's claim in the informer cache", func() bool {
		_, err := factory.Resource().V1().ResourceClaims().Lister().ResourceClaims("training").Get("monitor-gpu")
		return err == nil
	})
	recovered := podReporting("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusHealthy)
	recovered.Name, recovered.UID, recovered.Spec.ResourceClaims[0].ResourceClaimName = "monitor", "monitor-uid", ptr.To("monitor-gpu")
	if _, err := client.CoreV1().Pods("training").Create(ctx, recovered, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the waiting pod to be retried", func() bool {
		a := h.activated()
		return len(a) == 1 && a[0]["training/waiting"] == waiting
	})
	waitFor(ctx, t, "the side cache to count gpu-0 available again", func() bool {
		snap := rt.Pools().Get(pool)
		return snap != nil && snap.Summary.Available == 2
	})
	if got := rt.waiting.len(); got != 0 {
		t.Errorf("%d pods still waiting after the retry", got)
	}

	cancel()
	rt.Wait()
	if got := gauge(t, "drascope_resourcepool_devices", map[string]string{"pool": "node-1", "state": "Available"}); got != -1 {
		t.Errorf("a stopped runtime's pools are still exported: Available = %v", got)
	}
}

// TestHoldFreedRetriesWaitingPods: a pod scheduled while a release hold
// kept a device in use is retried when the hold's check finds the released
// allocation never written, under every device health policy (Ignore
// here): the claim does not change, so no informer event would retry it,
// and it would wait for the scheduling queue's five-minute flush with the
// device free (TestAPIServerRestartMidBurst: 2 of 80 pods left pending).
func TestHoldFreedRetriesWaitingPods(t *testing.T) {
	args := defaults()
	args.DeviceHealth.Policy = config.DeviceHealthIgnore
	ctx, cancel, client, _, h, rt := startedRuntime(t, args)
	defer cancel()
	// Unreserve released the claim's allocation after PreBind began; the
	// write failed, and the API has the claim as the scheduler saw it (or,
	// as the fake may store it without a resource version, not at all:
	// either frees the hold).
	created, err := client.ResourceV1().ResourceClaims("training").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "trainer-gpu", UID: "claim-uid"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waiting := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "waiting", UID: "waiting-uid"}}
	rt.RetryWhenDevicesFree(waiting)
	rt.Holds().Released(created.UID, &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"},
	}}})
	rt.Holds().Restored(created)
	waitFor(ctx, t, "the waiting pod to be retried", func() bool {
		a := h.activated()
		return len(a) == 1 && a[0]["training/waiting"] == waiting
	})
	if got := rt.waiting.len(); got != 0 {
		t.Errorf("%d pods still waiting after the retry", got)
	}
}

// podReporting is a running pod whose container reports one device's
// health, as kubelet writes it (KEP-4680).
func podReporting(device string, status v1.ResourceHealthStatus) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "trainer", UID: "trainer-uid"},
		Spec: v1.PodSpec{
			NodeName:       "node-1",
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("trainer-gpu")}},
			Containers:     []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning,
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "app",
				AllocatedResourcesStatus: []v1.ResourceStatus{{
					Name:      "claim:gpu",
					Resources: []v1.ResourceHealth{{ResourceID: v1.ResourceID(device), Health: status}},
				}},
			}},
		},
	}
}

func waitFor(ctx context.Context, t *testing.T, what string, done func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return done(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// gauge returns the value of the series of a gauge with the given labels
// from the process's legacy registry, or -1 when there is none.
func gauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// A waiting pod is forgotten once bound or deleted: a device that never
// recovers must not keep every pod ever refused near it.
func TestWaitingPodsAreForgottenWhenBoundOrDeleted(t *testing.T) {
	w := newWaitingPods(&activations{}, testingclock.NewFakeClock(time.Now()))
	bound := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bound", UID: "1"}}
	deleted := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deleted", UID: "2"}}
	still := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "still", UID: "3"}}
	for _, pod := range []*v1.Pod{bound, deleted, still} {
		w.add(pod)
	}
	h := w.handlers()
	h.OnUpdate(still, still.DeepCopy()) // a status update, still pending
	scheduled := bound.DeepCopy()
	scheduled.Spec.NodeName = "node-1"
	h.OnUpdate(bound, scheduled)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/deleted", Obj: deleted})
	if got := w.len(); got != 1 {
		t.Errorf("%d pods waiting, want 1 (ns/still)", got)
	}
}

func TestWaitingPodsAreActivatedOnce(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	a := &activations{}
	w := newWaitingPods(a, testingclock.NewFakeClock(time.Now()))
	w.activate(logger, "test") // nobody waits: no call
	w.add(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "1"}})
	w.add(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "1"}})
	w.activate(logger, "test")
	w.activate(logger, "test")
	if got := a.activated(); len(got) != 1 || len(got[0]) != 1 || got[0]["ns/p"] == nil {
		t.Errorf("activations %v, want ns/p once", got)
	}
}

// One recovery beside 200 waiting pods retries them 64 at a time, a
// second apart, the longest waiting first; a pod bound meanwhile is not
// retried, and one refused again after its retry waits for the next
// recovery rather than this one's later batches.
func TestWaitingPodsAreActivatedInBatches(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	a := &activations{}
	clk := testingclock.NewFakeClock(time.Now())
	w := newWaitingPods(a, clk)
	pod := func(i int) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%03d", i), UID: types.UID(fmt.Sprint(i))}}
	}
	for i := range 200 {
		w.add(pod(i))
	}
	w.activate(logger, "test")
	batches := func() []int {
		var sizes []int
		for _, batch := range a.activated() {
			sizes = append(sizes, len(batch))
		}
		return sizes
	}
	if got := batches(); !slices.Equal(got, []int{activateBatch}) {
		t.Fatalf("batches %v right after the recovery, want one of %d", got, activateBatch)
	}
	for i := range activateBatch {
		if a.activated()[0][fmt.Sprintf("ns/p%03d", i)] == nil {
			t.Fatalf("the first batch lacks p%03d, one of the longest waiting", i)
		}
	}
	w.activate(logger, "test") // a second recovery keeps the pace
	if got := batches(); !slices.Equal(got, []int{activateBatch}) {
		t.Fatalf("batches %v after a second recovery, want still one of %d", got, activateBatch)
	}
	w.remove(pod(100).UID) // bound meanwhile
	w.add(pod(0))          // retried, and refused again
	for i := range 3 {
		waitFor(context.Background(), t, "the next batch to be scheduled", clk.HasWaiters)
		clk.Step(activateInterval)
		waitFor(context.Background(), t, "the next batch", func() bool { return len(a.activated()) == i+2 })
	}
	if got := batches(); !slices.Equal(got, []int{64, 64, 64, 7}) {
		t.Errorf("batches %v, want 64, 64, 64 and the 7 left of the 199 still waiting", got)
	}
	for _, batch := range a.activated()[1:] {
		if batch["ns/p100"] != nil || batch["ns/p000"] != nil {
			t.Errorf("a later batch retried a pod bound meanwhile or one refused again: %v", batch)
		}
	}
	w.mu.Lock()
	draining := w.draining
	w.mu.Unlock()
	if w.len() != 1 || clk.HasWaiters() || draining {
		t.Errorf("%d pods waiting (want p000, refused again), a batch still scheduled: %v", w.len(), clk.HasWaiters() || draining)
	}
}
