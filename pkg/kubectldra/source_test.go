package kubectldra

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	poolsfake "github.com/drascope/drascope/pkg/generated/clientset/versioned/fake"
)

// These tests check kubectl dra's own branching: which source it reads pools
// from and what it says about what RBAC hid. The client-go fakes stand in for
// the apiserver only as a store that answers or refuses; field selectors,
// RBAC and the CRD are exercised end to end in test/integration.

const testDriver = "gpu.example.com"

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func testSlice(node string, devices ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: testDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
	}
	return s
}

func testClaim(namespace, name, node, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: testDriver, Pool: node, Device: device}},
		}}},
	}
}

// published is a ResourcePool as the scheduler writes it.
func published(node string, allocated int32, devices ...v1alpha1.DeviceStatus) *v1alpha1.ResourcePool {
	name, _ := v1alpha1.PlainName(testDriver, node)
	return &v1alpha1.ResourcePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec:       v1alpha1.ResourcePoolSpec{Driver: testDriver, PoolName: node, NodeName: node},
		Status: v1alpha1.ResourcePoolStatus{
			Summary:            &v1alpha1.PoolSummary{TotalDevices: 2, AllocatedDevices: allocated, AvailableDevices: 2 - allocated},
			ObservedSliceCount: 1, ExpectedSliceCount: 1, ObservedGeneration: 1,
			DeviceHealthPolicy: "Avoid",
			Devices:            devices,
		},
	}
}

// refuse makes every verb on resource (in namespace, "" for all) fail with err.
func refuse(f *k8stesting.Fake, verb, resource, namespace string, err error) {
	f.PrependReactor(verb, resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
		if namespace == "*" || action.GetNamespace() == namespace {
			return true, nil, err
		}
		return false, nil, nil
	})
}

func forbidden(resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
}

type cluster struct {
	client *fake.Clientset
	pools  *poolsfake.Clientset
}

func newCluster(objects []runtime.Object, pools ...runtime.Object) cluster {
	return cluster{client: fake.NewClientset(objects...), pools: poolsfake.NewSimpleClientset(pools...)}
}

func (c cluster) source(namespace string) *poolSource {
	return &poolSource{pools: c.pools, client: c.client, namespace: namespace, now: now}
}

// reads counts the list calls made for one resource.
func (c cluster) reads(resource string) int {
	n := 0
	for _, a := range c.client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func TestListChoosesItsSource(t *testing.T) {
	twoNodes := []runtime.Object{
		testSlice("node-1", "gpu-0", "gpu-1"), testSlice("node-2", "gpu-0", "gpu-1"),
		testClaim("team-a", "train", "node-1", "gpu-0"),
	}
	tests := map[string]struct {
		pools     []runtime.Object
		breakPool func(*k8stesting.Fake)
		break8s   func(*k8stesting.Fake)
		filter    poolFilter
		// want: name and allocated devices of each pool.
		want      map[string]int32
		wantNotes []string
		wantErr   string
	}{
		"ResourcePools when there are some": {
			pools: []runtime.Object{published("node-1", 2)},
			want:  map[string]int32{"gpu.example.com.node-1": 2},
		},
		"computed when there are none": {
			want:      map[string]int32{"gpu.example.com.node-1": 1, "gpu.example.com.node-2": 0},
			wantNotes: []string{"(no ResourcePool objects found: computed from ResourceSlices and ResourceClaims)"},
		},
		"computed, filtered by node": {
			filter:    poolFilter{node: "node-2"},
			want:      map[string]int32{"gpu.example.com.node-2": 0},
			wantNotes: []string{"(no ResourcePool objects found: computed from ResourceSlices and ResourceClaims)"},
		},
		"computed when ResourcePools may not be listed": {
			pools:     []runtime.Object{published("node-1", 2)},
			breakPool: func(f *k8stesting.Fake) { refuse(f, "list", "resourcepools", "*", forbidden("resourcepools")) },
			want:      map[string]int32{"gpu.example.com.node-1": 1, "gpu.example.com.node-2": 0},
			wantNotes: []string{"(listing ResourcePools is not permitted: computed from ResourceSlices and ResourceClaims)"},
		},
		"computed when the CRD is missing": {
			breakPool: func(f *k8stesting.Fake) {
				refuse(f, "list", "resourcepools", "*", apierrors.NewNotFound(v1alpha1.Resource("resourcepools"), ""))
			},
			want:      map[string]int32{"gpu.example.com.node-1": 1, "gpu.example.com.node-2": 0},
			wantNotes: []string{"(the ResourcePool CRD is not installed: computed from ResourceSlices and ResourceClaims)"},
		},
		"another error is an error": {
			breakPool: func(f *k8stesting.Fake) {
				refuse(f, "list", "resourcepools", "*", apierrors.NewInternalError(context.DeadlineExceeded))
			},
			wantErr: "reading ResourcePools: Internal error occurred: context deadline exceeded",
		},
		"no slices may be listed": {
			break8s: func(f *k8stesting.Fake) { refuse(f, "list", "resourceslices", "", forbidden("resourceslices")) },
			want:    map[string]int32{},
			wantNotes: []string{
				"(no ResourcePool objects found: computed from ResourceSlices and ResourceClaims)",
				"(listing ResourceSlices is not permitted: no pools can be shown)",
			},
		},
		"no claims may be listed: nothing counts as allocated": {
			break8s: func(f *k8stesting.Fake) { refuse(f, "list", "resourceclaims", "*", forbidden("resourceclaims")) },
			want:    map[string]int32{"gpu.example.com.node-1": 0, "gpu.example.com.node-2": 0},
			wantNotes: []string{
				"(no ResourcePool objects found: computed from ResourceSlices and ResourceClaims)",
				"(listing ResourceClaims is not permitted: allocations are not counted)",
			},
		},
		"claims of one namespace only would undercount: not counted": {
			break8s: func(f *k8stesting.Fake) { refuse(f, "list", "resourceclaims", "", forbidden("resourceclaims")) },
			want:    map[string]int32{"gpu.example.com.node-1": 0, "gpu.example.com.node-2": 0},
			wantNotes: []string{
				"(no ResourcePool objects found: computed from ResourceSlices and ResourceClaims)",
				"(listing ResourceClaims is not permitted: allocations are not counted)",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newCluster(twoNodes, tc.pools...)
			if tc.breakPool != nil {
				tc.breakPool(&c.pools.Fake)
			}
			if tc.break8s != nil {
				tc.break8s(&c.client.Fake)
			}
			pools, notes, err := c.source("team-a").List(context.Background(), tc.filter)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int32{}
			for _, rp := range pools {
				got[rp.Name] = summaryOf(&rp).AllocatedDevices
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNotes, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetByNameOrByPool(t *testing.T) {
	c := newCluster([]runtime.Object{testSlice("node-1", "gpu-0", "gpu-1"), testSlice("node-2", "gpu-0")}, published("node-1", 1))
	ctx := context.Background()

	rp, notes, err := c.source("").Get(ctx, "gpu.example.com.node-1", drausage.PoolID{})
	if err != nil || rp.Spec.PoolName != "node-1" || len(notes) != 0 || summaryOf(rp).AllocatedDevices != 1 {
		t.Errorf("by name, published: %v %v %v; want the ResourcePool and no note", rp, notes, err)
	}
	rp, notes, err = c.source("").Get(ctx, "gpu.example.com.node-2", drausage.PoolID{})
	if err != nil || rp.Spec.PoolName != "node-2" || len(notes) != 1 || !strings.HasPrefix(notes[0], "(no ResourcePool objects found: computed") {
		t.Errorf("by name, not published: %v %v %v; want it computed, with the note", rp, notes, err)
	}
	rp, _, err = c.source("").Get(ctx, "", drausage.PoolID{Driver: testDriver, Pool: "node-2"})
	if err != nil || rp.Name != "gpu.example.com.node-2" {
		t.Errorf("by driver and pool, not published: %v %v; want it computed", rp, err)
	}
	if _, _, err := c.source("").Get(ctx, "no-such-pool", drausage.PoolID{}); err == nil || !strings.Contains(err.Error(), `pool "no-such-pool" not found`) {
		t.Errorf("unknown name: got %v, want a not-found error", err)
	}
	if _, _, err := c.source("").Get(ctx, "", drausage.PoolID{Driver: testDriver, Pool: "node-9"}); err == nil || !strings.Contains(err.Error(), `pool "node-9" of driver "gpu.example.com" not found`) {
		t.Errorf("unknown pool: got %v, want a not-found error", err)
	}
}

// Two objects for one pool (one made by hand): describe shows the oldest,
// the one the publisher keeps. A pool not found says what RBAC hid, which
// may be why.
func TestGetPicksTheOldestAndKeepsNotesOnNotFound(t *testing.T) {
	kept := published("node-1", 1)
	copied := published("node-1", 2)
	copied.Name, copied.CreationTimestamp = "by-hand", metav1.NewTime(now)
	c := newCluster([]runtime.Object{testSlice("node-1", "gpu-0", "gpu-1")}, copied, kept)
	rp, _, err := c.source("").Get(context.Background(), "", drausage.PoolID{Driver: testDriver, Pool: "node-1"})
	if err != nil || rp.Name != kept.Name {
		t.Errorf("got %v, %v; want the older object %s", rp, err, kept.Name)
	}

	c = newCluster([]runtime.Object{testSlice("node-1", "gpu-0")})
	refuse(&c.client.Fake, "list", "resourceslices", "", forbidden("resourceslices"))
	_, notes, err := c.source("").Get(context.Background(), "gpu.example.com.node-1", drausage.PoolID{})
	if err == nil || !slices.Contains(notes, noteSlicesHidden) {
		t.Errorf("slices hidden: got notes %q, error %v; want not found, with the note that slices are hidden", notes, err)
	}
}

// --show-devices reads the cluster's slices, claims and rules once, however
// many pools it shows.
func TestDetailReadsTheClusterOnce(t *testing.T) {
	objects := []runtime.Object{testSlice("node-1", "gpu-0"), testSlice("node-2", "gpu-0"), testSlice("node-3", "gpu-0")}
	c := newCluster(objects)
	s := c.source("")
	pools, _, err := s.List(context.Background(), poolFilter{})
	if err != nil || len(pools) != 3 {
		t.Fatalf("pools %v, %v; want 3", pools, err)
	}
	for i := range pools {
		if detail, note, err := s.Detail(context.Background(), &pools[i]); err != nil || detail == nil || note != "" {
			t.Fatalf("detail of %s: %v %q %v", pools[i].Name, detail, note, err)
		}
	}
	for _, resource := range []string{"resourceslices", "resourceclaims", "devicetaintrules"} {
		if n := c.reads(resource); n != 1 {
			t.Errorf("%s listed %d times, want once", resource, n)
		}
	}
}

// A user who may list the claims of one namespace sees those claims named;
// devices that other claims hold show as held, from the ResourcePool, with no
// claim; the health is the scheduler's.
func TestDetailForANamespaceLimitedUser(t *testing.T) {
	objects := []runtime.Object{
		testSlice("node-1", "gpu-0", "gpu-1"),
		testClaim("team-a", "mine", "node-1", "gpu-0"),
		testClaim("team-b", "theirs", "node-1", "gpu-1"),
	}
	rp := published("node-1", 2,
		v1alpha1.DeviceStatus{Name: "gpu-0", State: "Allocated"},
		v1alpha1.DeviceStatus{Name: "gpu-1", State: "Allocated", Health: "Unhealthy", HealthMessage: "reported by pod team-b/p"})
	c := newCluster(objects, rp)
	refuse(&c.client.Fake, "list", "resourceclaims", "", forbidden("resourceclaims"))

	detail, note, err := c.source("team-a").Detail(context.Background(), rp)
	if err != nil {
		t.Fatal(err)
	}
	if note != "(listing ResourceClaims is permitted in namespace team-a only: devices held by other claims are shown without them)" {
		t.Errorf("note %q", note)
	}
	var out strings.Builder
	if err := printPool(&out, rp, detail, note, nil, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  gpu-0                  Allocated   Unknown     team-a/mine       \n",
		"  gpu-1                  Allocated   Unhealthy   <not permitted>   reported by pod team-b/p\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "theirs") {
		t.Errorf("describe output names a claim the user may not list:\n%s", out.String())
	}

	refuse(&c.client.Fake, "list", "resourceclaims", "team-a", forbidden("resourceclaims"))
	if detail, note, err := c.source("team-a").Detail(context.Background(), rp); err != nil || detail != nil || note != "(listing ResourceClaims is not permitted: device detail hidden)" {
		t.Errorf("no claims at all: %v %q %v; want no detail and the note", detail, note, err)
	}
}

// A user who may list the claims of some namespaces, not all, sees the
// claims of each of them, not only those of the kubeconfig's namespace.
func TestDetailForAUserOfSeveralNamespaces(t *testing.T) {
	objects := []runtime.Object{
		testSlice("node-1", "gpu-0", "gpu-1", "gpu-2"),
		testClaim("team-a", "mine", "node-1", "gpu-0"),
		testClaim("team-b", "ours", "node-1", "gpu-1"),
		testClaim("team-c", "theirs", "node-1", "gpu-2"),
	}
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		objects = append(objects, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	rp := published("node-1", 3)
	c := newCluster(objects, rp)
	refuse(&c.client.Fake, "list", "resourceclaims", "", forbidden("resourceclaims"))
	refuse(&c.client.Fake, "list", "resourceclaims", "team-c", forbidden("resourceclaims"))

	detail, note, err := c.source("team-a").Detail(context.Background(), rp)
	if err != nil {
		t.Fatal(err)
	}
	if note != "(listing ResourceClaims is permitted in namespaces team-a, team-b only: devices held by other claims are shown without them)" {
		t.Errorf("note %q", note)
	}
	holders := map[string]string{}
	for _, d := range detail.Devices {
		for _, a := range d.Allocations {
			holders[d.Name] = a.Claim.String()
		}
	}
	if diff := cmp.Diff(map[string]string{"gpu-0": "team-a/mine", "gpu-1": "team-b/ours"}, holders); diff != "" {
		t.Errorf("claims shown (-want +got):\n%s", diff)
	}
}
