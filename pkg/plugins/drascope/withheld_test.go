package drascope

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drascope/drascope/pkg/dramanager"
	"github.com/drascope/drascope/pkg/withheld"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/poolcache"
)

// allocatedTracker stands in for the scheduler's claim tracker in what
// PreFilter asks of it: like upstream, it hands out a fresh copy of the
// allocated devices for every call.
type allocatedTracker struct {
	fwk.ResourceClaimTracker
	allocated sets.Set[structured.DeviceID]
	err       error
}

func (t *allocatedTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	if t.err != nil {
		return nil, t.err
	}
	return t.allocated.Clone(), nil
}

func (t *allocatedTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	if t.err != nil {
		return nil, t.err
	}
	return &structured.AllocatedState{AllocatedDevices: t.allocated.Clone()}, nil
}

// innerParts is a SharedDRAManager with only the parts a test sets.
type innerParts struct {
	fwk.SharedDRAManager
	claims fwk.ResourceClaimTracker
	slices fwk.ResourceSliceLister
}

func (m innerParts) ResourceClaims() fwk.ResourceClaimTracker { return m.claims }
func (m innerParts) ResourceSlices() fwk.ResourceSliceLister  { return m.slices }

func deviceID(i int) structured.DeviceID {
	return structured.MakeDeviceID("gpu.example.com", fmt.Sprintf("node-%d", i/8), fmt.Sprintf("gpu-%d", i%8))
}

// healthCacheWithUnhealthy returns a health cache in which devices
// [from, from+n) were reported Unhealthy by running pods.
func healthCacheWithUnhealthy(logger klog.Logger, from, n int) *health.Cache {
	return healthCacheWith(logger, from, n, deviceID)
}

// healthCacheWith reports deviceOf(i) Unhealthy for i in [from, from+n).
func healthCacheWith(logger klog.Logger, from, n int, deviceOf func(int) structured.DeviceID) *health.Cache {
	claims := map[string]*resourceapi.ResourceClaim{}
	c := health.New(health.Options{HoldTime: time.Hour, Resolver: health.Resolver{
		Claim: func(namespace, name string) (*resourceapi.ResourceClaim, error) { return claims[name], nil },
	}})
	for i := from; i < from+n; i++ {
		id := deviceOf(i)
		name := fmt.Sprintf("pod-%d", i)
		uid := types.UID(name)
		claims[name] = &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: id.Driver.String(), Pool: id.Pool.String(), Device: id.Device.String()},
			}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: uid}},
		}}
		c.ObservePod(logger, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
			Spec:       v1.PodSpec{NodeName: id.Pool.String(), ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}},
			Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{
				Name: "ctr",
				AllocatedResourcesStatus: []v1.ResourceStatus{{Name: "claim:gpu", Resources: []v1.ResourceHealth{{
					ResourceID: v1.ResourceID(id.String()), Health: v1.ResourceHealthStatusUnhealthy,
				}}}},
			}}},
		})
	}
	return c
}

func TestWithheldDevicesAreInUseForTheAllocator(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	inner := &allocatedTracker{allocated: sets.New(deviceID(0), deviceID(1))}
	unhealthy := healthCacheWithUnhealthy(logger, 1, 2) // device 1 allocated and Unhealthy, device 2 free and Unhealthy
	want := sets.New(deviceID(0), deviceID(1), deviceID(2))

	claims := dramanager.New(innerParts{claims: inner}, nil, unhealthy, nil).ResourceClaims()
	got, err := claims.ListAllAllocatedDevices()
	if err != nil || !got.Equal(want) {
		t.Errorf("ListAllAllocatedDevices = %v, %v; want %v", got, err, want)
	}
	state, err := claims.GatherAllocatedState()
	if err != nil || !state.AllocatedDevices.Equal(want) {
		t.Errorf("GatherAllocatedState = %v, %v; want %v", state, err, want)
	}
	if inner.allocated.Len() != 2 {
		t.Errorf("the scheduler's own set was changed: %v", inner.allocated)
	}

	// Policy Ignore: nothing withheld.
	ignoring := dramanager.New(innerParts{claims: inner}, nil, nil, nil).ResourceClaims()
	if got, _ := ignoring.ListAllAllocatedDevices(); !got.Equal(inner.allocated) {
		t.Errorf("with policy Ignore: %v, want the scheduler's own %v", got, inner.allocated)
	}

	// A concurrent modification is passed on for upstream to retry.
	inner.err = errors.New("concurrent modification")
	if _, err := claims.ListAllAllocatedDevices(); !errors.Is(err, inner.err) {
		t.Errorf("error %v, want the inner one", err)
	}
}

// BenchmarkAllocatedState measures what the allocator's view of devices in
// use costs on the PreFilter path, with 1000 devices allocated: upstream's
// tracker alone, and through drascope's decorator with 0 and with 1000
// Unhealthy devices withheld. The decorator adds one map insert per
// Unhealthy device.
func BenchmarkAllocatedState(b *testing.B) {
	logger := klog.Background()
	allocated := sets.New[structured.DeviceID]()
	for i := range 1000 {
		allocated.Insert(deviceID(i))
	}
	inner := &allocatedTracker{allocated: allocated}
	for _, tc := range []struct {
		name      string
		unhealthy int
		decorated bool
	}{
		{name: "upstream"},
		{name: "drascope/unhealthy=0", decorated: true},
		{name: "drascope/unhealthy=1000", unhealthy: 1000, decorated: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var claims fwk.ResourceClaimTracker = inner
			if tc.decorated {
				claims = dramanager.New(innerParts{claims: inner}, nil, healthCacheWithUnhealthy(logger, 1000, tc.unhealthy), nil).ResourceClaims()
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := claims.GatherAllocatedState(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestWithheldNoteNamesTheNodesDevicesOnly(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	// node-0: gpu-0..gpu-7 Unhealthy; node-1: gpu-0, gpu-1.
	pl := &DRAScope{
		health: healthCacheWithUnhealthy(logger, 0, 10),
		pools:  poolcache.New(poolcache.Options{}),
	}
	node := func(name string) string { return name }
	cycle := withheld.NewCycle(nil, false)
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "waiting"}}
	src := pl.withheldSource()

	got := cycle.Note(ctx, src, pending.Namespace, node("node-1"))
	for _, want := range []string{"gpu.example.com/node-1/gpu-0 (", "gpu.example.com/node-1/gpu-1 ("} {
		if !strings.Contains(got, want) {
			t.Errorf("note for node-1 = %q, want it to name %s", got, want)
		}
	}
	if strings.Contains(got, "node-0") {
		t.Errorf("note for node-1 = %q names node-0's devices", got)
	}
	if got := cycle.Note(ctx, src, pending.Namespace, node("node-0")); !strings.Contains(got, "node-0/gpu-2 (") || !strings.HasSuffix(got, "and 5 more") {
		t.Errorf("note for node-0 = %q, want gpu-0..gpu-2 named and 5 more", got)
	}
	if got := cycle.Note(ctx, src, pending.Namespace, node("node-2")); got != "" {
		t.Errorf("note for node-2, which reported nothing = %q, want none", got)
	}

	// The note lands in the pending pod's status and events: a pod of
	// another namespace learns the node's kubelet reported it, not which
	// pod of which tenant.
	if got := cycle.Note(ctx, src, pending.Namespace, node("node-1")); !strings.Contains(got, "reported by pod default/") {
		t.Errorf("note for a pod of the reporter's namespace = %q, want the reporting pod named", got)
	}
	stranger := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "waiting"}}
	if got := cycle.Note(ctx, src, stranger.Namespace, node("node-1")); strings.Contains(got, "default") || !strings.Contains(got, "reported by kubelet on node node-1") {
		t.Errorf("note for a pod of another namespace = %q, want the node's kubelet and no namespace", got)
	}
}

func TestWithheldNoteNamesDevicesOfThePodsClassesOnly(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	// node-1: gpu-2 and gpu-3 Unhealthy, published as GPUs.
	pools := poolcache.New(poolcache.Options{})
	pools.SetSlice(&resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.example.com", NodeName: ptr.To("node-1"),
			Pool:    resourceapi.ResourcePool{Name: "node-1", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-2"}, {Name: "gpu-3"}},
		},
	})
	pools.Sync()
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for name, driver := range map[string]string{"gpu": "gpu.example.com", "nic": "nic.example.com"} {
		if err := classes.Add(&resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
			}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	pl := &DRAScope{
		health:  healthCacheWithUnhealthy(logger, 10, 2),
		pools:   pools,
		classes: resourcelisters.NewDeviceClassLister(classes),
	}
	node := "node-1"
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "waiting"}}
	claimFor := func(requests ...resourceapi.DeviceRequest) *podClaims {
		return &podClaims{toAllocate: []*resourceapi.ResourceClaim{{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: requests},
		}}}}
	}
	exactly := func(class string) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: class, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	}
	for name, tc := range map[string]struct {
		claims *podClaims
		named  bool
	}{
		"a NIC is not told of withheld GPUs": {claims: claimFor(exactly("nic"))},
		"a GPU is":                           {claims: claimFor(exactly("gpu")), named: true},
		"so is a NIC and a GPU":              {claims: claimFor(exactly("nic"), exactly("gpu")), named: true},
		"and a prioritized list with a GPU as its second choice": {claims: claimFor(resourceapi.DeviceRequest{Name: "any",
			FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "nic", DeviceClassName: "nic"}, {Name: "gpu", DeviceClassName: "gpu"}}}), named: true},
		"claims not gathered name every device":               {claims: nil, named: true},
		"an unknown class names every device":                 {claims: claimFor(exactly("fpga")), named: true},
		"claims that could not be read too":                   {claims: &podClaims{unknown: 1}, named: true},
		"a pod with nothing left to allocate is told of none": {claims: &podClaims{}},
	} {
		t.Run(name, func(t *testing.T) {
			cycle := withheld.NewCycle(nil, false)
			if tc.claims != nil {
				cycle = withheld.NewCycle(tc.claims.toAllocate, tc.claims.unknown == 0)
			}
			got := cycle.Note(ctx, pl.withheldSource(), pending.Namespace, node)
			if named := strings.Contains(got, "gpu.example.com/node-1/gpu-2 (") && strings.Contains(got, "gpu.example.com/node-1/gpu-3 ("); named != tc.named || (!named && got != "") {
				t.Errorf("note = %q; want the withheld GPUs named: %v", got, tc.named)
			}
		})
	}
}

// One Unhealthy device on each of 2000 nodes: every node's refusal gives
// the same reason, so the scheduler's message counts the nodes, and the
// devices named once, in PostFilter's note, are a few. The message stays
// a few hundred bytes, where naming every node's devices made it grow
// with the cluster towards the object size limit.
func TestWithheldMessageIsBoundedAtScale(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	const nodes = 2000
	pl := &DRAScope{
		health: healthCacheWith(logger, 0, nodes, func(i int) structured.DeviceID {
			return structured.MakeDeviceID("gpu.example.com", fmt.Sprintf("node-%d", i), "gpu-0")
		}),
		pools: poolcache.New(poolcache.Options{}),
	}
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "waiting"}}
	w := withheld.NewCycle(nil, false)
	state := framework.NewCycleState()
	state.Write(withheldKey, withheldState{w})
	statuses := map[string]*fwk.Status{}
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		if !w.Reaches(ctx, pl.withheldSource(), name) {
			t.Fatalf("%s reaches no withheld device, want its own one", name)
		}
		statuses[name] = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "cannot allocate all claims", withheld.Reason)
	}
	nodeToStatus := framework.NewNodeToStatus(statuses, fwk.NewStatus(fwk.UnschedulableAndUnresolvable))
	note := pl.withheldSummary(ctx, state, pending, nodeToStatus)
	if !strings.HasPrefix(note, "devices withheld because kubelet reported them Unhealthy: gpu.example.com/node-0/gpu-0 (") || !strings.HasSuffix(note, fmt.Sprintf("and %d more", nodes-withheld.MaxInMessage)) {
		t.Errorf("note = %q; want the first devices named and the rest counted", note)
	}
	fitError := &framework.FitError{Pod: pending, NumAllNodes: nodes, Diagnosis: framework.Diagnosis{NodeToStatus: nodeToStatus, PostFilterMsg: note}}
	message := fitError.Error()
	if !strings.Contains(message, fmt.Sprintf("%d %s", nodes, withheld.Reason)) {
		t.Errorf("the message does not count the nodes: %s", message)
	}
	if len(message) > 1024 {
		t.Errorf("the message of %d nodes is %d bytes, want under 1 KiB:\n%s", nodes, len(message), message)
	}
	t.Logf("%d bytes: %s", len(message), message)
}
