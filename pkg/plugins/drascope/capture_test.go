package drascope

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/dramanager"
)

// recordingManager sits under drascope's decorator and records what the
// scheduler's DRA manager answers upstream's PreFilter: how often each
// call is made, and the last answer.
type recordingManager struct {
	fwk.SharedDRAManager
	claims *recordingTracker
	slices *recordingSlices
}

func (m *recordingManager) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }
func (m *recordingManager) ResourceSlices() fwk.ResourceSliceLister  { return m.slices }

type recordingTracker struct {
	fwk.ResourceClaimTracker
	listCalls, gatherCalls int
	last                   sets.Set[structured.DeviceID]
	// change, when set, may replace the claim a Get returns.
	change func(*resourceapi.ResourceClaim) *resourceapi.ResourceClaim
}

func (t *recordingTracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	claim, err := t.ResourceClaimTracker.Get(namespace, name)
	if err == nil && t.change != nil {
		claim = t.change(claim)
	}
	return claim, err
}

func (t *recordingTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	t.listCalls++
	devices, err := t.ResourceClaimTracker.ListAllAllocatedDevices()
	t.last = devices.Clone()
	return devices, err
}

func (t *recordingTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	t.gatherCalls++
	state, err := t.ResourceClaimTracker.GatherAllocatedState()
	if state != nil {
		t.last = state.AllocatedDevices.Clone()
	}
	return state, err
}

type recordingSlices struct {
	fwk.ResourceSliceLister
	calls int
	last  []*resourceapi.ResourceSlice
}

func (l *recordingSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	l.calls++
	slices, err := l.ResourceSliceLister.ListWithDeviceTaintRules()
	l.last = slices
	return slices, err
}

const captureDriver = "gpu.example.com"

func captureSlice(node string, devices int) *resourceapi.ResourceSlice {
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: captureDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range devices {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
	}
	return slice
}

func captureClaim(name string, allocatedOn ...string) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: captureDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
	if len(allocatedOn) == 2 {
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: captureDriver, Pool: allocatedOn[0], Device: allocatedOn[1]},
		}}}
	}
	return claim
}

// capturePod is the pod that asks for claim.
func capturePod(claim *resourceapi.ResourceClaim) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod", UID: "uid-pod"},
		Spec:       v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}}},
	}
}

// TestCaptureIsWhatUpstreamBuiltItsAllocatorFrom runs upstream's real
// PreFilter and Filter (the v1.37.2 dynamicresources plugin, set up as its
// own tests set it up) through drascope's decorated handle, on a table of
// clusters. It pins the seam that node pruning, preemption's dry runs and
// the admin-access counters workaround ride on: upstream's PreFilter makes
// exactly one in-use call of the kind the features select and one slice
// listing, the capture holds those answers, and upstream's Filter places the
// pod exactly where the captured view has a free device. A Kubernetes bump
// that changes which calls PreFilter makes fails here.
func TestCaptureIsWhatUpstreamBuiltItsAllocatorFrom(t *testing.T) {
	for _, tc := range []struct {
		name       string
		consumable bool
		// held: claims allocated in the API; inFlight: an allocation
		// signalled as in flight (node, device).
		held     []*resourceapi.ResourceClaim
		inFlight []string
	}{
		{name: "one device in use", held: []*resourceapi.ResourceClaim{captureClaim("a", "node-1", "gpu-0")}},
		{name: "consumable capacity", consumable: true, held: []*resourceapi.ResourceClaim{captureClaim("a", "node-1", "gpu-0")}},
		{name: "a node full", held: []*resourceapi.ResourceClaim{captureClaim("a", "node-1", "gpu-0"), captureClaim("b", "node-1", "gpu-1")}},
		{name: "a node full with an allocation in flight", held: []*resourceapi.ResourceClaim{captureClaim("a", "node-2", "gpu-0")}, inFlight: []string{"node-2", "gpu-1"}},
		{name: "every device in use", consumable: true, held: []*resourceapi.ResourceClaim{
			captureClaim("a", "node-1", "gpu-0"), captureClaim("b", "node-1", "gpu-1"), captureClaim("c", "node-2", "gpu-0"), captureClaim("d", "node-2", "gpu-1"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()

			mine := captureClaim("mine")
			pod := capturePod(mine)
			objects := []runtime.Object{
				&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: captureDriver}},
				captureSlice("node-1", 2), captureSlice("node-2", 2), mine, pod,
			}
			for _, claim := range tc.held {
				objects = append(objects, claim)
			}
			if len(tc.inFlight) == 2 {
				// Being allocated for another pod: in the API, not yet
				// allocated there.
				objects = append(objects, captureClaim("in-flight"))
			}
			fts := feature.Features{EnableDynamicResourceAllocation: true, EnableDRAConsumableCapacity: tc.consumable}
			upstream, manager, recording := upstreamThroughDecorator(ctx, t, objects, fts, nil)
			if len(tc.inFlight) == 2 {
				other := captureClaim("in-flight", tc.inFlight...)
				if err := manager.ResourceClaims().SignalClaimPendingAllocation(other.UID, other); err != nil {
					t.Fatal(err)
				}
			}

			var nodes []fwk.NodeInfo
			for _, name := range []string{"node-1", "node-2"} {
				info := framework.NewNodeInfo()
				info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
				nodes = append(nodes, info)
			}
			state := framework.NewCycleState()
			manager.BeginCapture()
			if _, status := upstream.PreFilter(ctx, state, pod, nodes); !status.IsSuccess() && status.Code() != fwk.UnschedulableAndUnresolvable {
				t.Fatalf("upstream's PreFilter: %v", status)
			}
			inUse, listed, ok := manager.TakeCapture()
			if !ok {
				t.Fatal("nothing captured: upstream's PreFilter built its allocator from calls the decorator does not see")
			}

			wantList, wantGather := 1, 0
			if tc.consumable {
				wantList, wantGather = 0, 1
			}
			if c := recording.claims; c.listCalls != wantList || c.gatherCalls != wantGather {
				t.Errorf("upstream's PreFilter called ListAllAllocatedDevices %d times and GatherAllocatedState %d times, want %d and %d: the capture's contract (pkg/dramanager/capture.go) no longer holds",
					c.listCalls, c.gatherCalls, wantList, wantGather)
			}
			if n := recording.slices.calls; n != 1 {
				t.Errorf("upstream's PreFilter listed the slices %d times, want once: the capture's contract (pkg/dramanager/capture.go) no longer holds", n)
			}
			if !inUse.State.AllocatedDevices.Equal(recording.claims.last) {
				t.Errorf("captured in-use set %v, upstream was handed %v", inUse.State.AllocatedDevices.UnsortedList(), recording.claims.last.UnsortedList())
			}
			if len(listed) != len(recording.slices.last) || len(listed) == 0 || &listed[0] != &recording.slices.last[0] {
				t.Errorf("captured %d slices, upstream listed %d, not the same list", len(listed), len(recording.slices.last))
			}

			// Upstream's allocator and the captured view agree on every node.
			for _, node := range nodes {
				name := node.Node().Name
				free := 0
				for _, slice := range listed {
					if ptr.Deref(slice.Spec.NodeName, "") != name {
						continue
					}
					for _, d := range slice.Spec.Devices {
						if !inUse.State.AllocatedDevices.Has(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name)) {
							free++
						}
					}
				}
				status := upstream.Filter(ctx, state, pod, node)
				if fits := status.IsSuccess(); fits != (free > 0) {
					t.Errorf("%s: upstream's Filter says fits=%v (%v), the captured view has %d free devices there", name, fits, status, free)
				}
			}
		})
	}
}

// upstreamThroughDecorator builds upstream's DynamicResources plugin as its
// own tests set it up (informers on a fake clientset holding objects, the
// slice tracker, the assume cache, the scheduler's DRA manager), with
// drascope's decorator between it and the manager, and a recording
// manager under the decorator. configure, when set, adjusts the decorator
// before upstream is built. The informers run until ctx ends.
func upstreamThroughDecorator(ctx context.Context, t testing.TB, objects []runtime.Object, fts feature.Features, configure func(*dramanager.Manager)) (*dynamicresources.DynamicResources, *dramanager.Manager, *recordingManager) {
	t.Helper()
	upstream, manager, recording, _ := upstreamWithClient(ctx, t, objects, fts, configure)
	return upstream, manager, recording
}

// upstreamWithClient is upstreamThroughDecorator, with the client its
// informers follow, for tests that change the objects.
func upstreamWithClient(ctx context.Context, t testing.TB, objects []runtime.Object, fts feature.Features, configure func(*dramanager.Manager)) (*dynamicresources.DynamicResources, *dramanager.Manager, *recordingManager, *fake.Clientset) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewSimpleClientset(objects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	slices, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		SliceInformer: factory.Resource().V1().ResourceSlices(),
		KubeClient:    client,
	})
	if err != nil {
		t.Fatal(err)
	}
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), factory.Resource().V1().ResourceClaims().Informer(), "resource claim", "", nil)
	synced := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{})
	shared := dynamicresources.NewDRAManager(ctx, claims, slices, factory)
	fh, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
		frameworkruntime.WithSharedDRAManager(shared),
	)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		// The informers end with ctx, and Shutdown waits for them.
		cancel()
		factory.Shutdown()
	})
	factory.WaitForCacheSync(ctx.Done())
	cache.WaitFor(ctx, "handlers", synced.HasSyncedChecker(), slices.HasSyncedChecker())

	recording := &recordingManager{
		SharedDRAManager: shared,
		claims:           &recordingTracker{ResourceClaimTracker: shared.ResourceClaims()},
		slices:           &recordingSlices{ResourceSliceLister: shared.ResourceSlices()},
	}
	manager := dramanager.New(recording, nil, nil, nil)
	if configure != nil {
		configure(manager)
	}
	plugin, err := dynamicresources.New(ctx, &schedconfig.DynamicResourcesArgs{}, &decoratedHandle{Handle: fh, draManager: manager}, fts)
	if err != nil {
		t.Fatal(err)
	}
	return plugin.(*dynamicresources.DynamicResources), manager, recording, client
}
