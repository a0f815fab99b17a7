package conflictcheck

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
)

var pool = drausage.PoolID{Driver: "gpu.example.com", Pool: "node-a"}

func claim(name string, allocated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: pool.Driver, Pool: pool.Pool, Device: "gpu-0"},
		}}}
	}
	return c
}

// cacheWithGPUs is a side cache of one pool, node-a, with these devices.
func cacheWithGPUs(names ...string) *poolcache.Cache {
	cache := poolcache.New(poolcache.Options{})
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:       resourceapi.ResourceSliceSpec{Driver: pool.Driver, Pool: resourceapi.ResourcePool{Name: pool.Pool, Generation: 1, ResourceSliceCount: 1}},
	}
	for _, name := range names {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: name})
	}
	cache.SetSlice(slice)
	return cache
}

// api is what the apiserver holds: a map stands in for the GET only.
type api map[string]*resourceapi.ResourceClaim

func (a api) get(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	if c, ok := a[namespace+"/"+name]; ok {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

type observed struct {
	checks   map[string]int
	reported []drausage.Conflict
}

func newChecker(cache *poolcache.Cache, a api) (*Checker, *observed) {
	o := &observed{checks: map[string]int{}}
	return New(cache, a.get, Options{
		Report: func(_ context.Context, _ drausage.PoolID, c []drausage.Conflict) {
			o.reported = append(o.reported, c...)
		},
		Observe: func(result string, n int) { o.checks[result] += n },
	}), o
}

func conflictsIn(cache *poolcache.Cache) (suspected, confirmed int) {
	snap := cache.Get(pool)
	return len(snap.Suspected), len(snap.Conflicts)
}

// A conflict that only the scheduler's in-flight view shows is not
// reported; once the API holds it too, it is, once.
func TestOnlyConflictsTheAPIHoldsAreReported(t *testing.T) {
	ctx := context.Background()
	cache := cacheWithGPUs("gpu-0")
	a := api{"ns/first": claim("first", true), "ns/second": claim("second", false)}
	cache.SetClaim(a["ns/first"])
	// The scheduler's in-flight view: "second" on gpu-0 too, which the
	// API does not hold (as when the informer has not yet seen "first"
	// deallocated, or the allocation is never written).
	cache.PendingAllocation(claim("second", true))
	cache.Sync()
	checker, o := newChecker(cache, a)

	if err := checker.check(ctx, pool); err != errUnconfirmed {
		t.Fatalf("check: %v, want errUnconfirmed (so that it is retried)", err)
	}
	cache.Sync()
	if s, c := conflictsIn(cache); s != 1 || c != 0 {
		t.Errorf("suspected %d, confirmed %d; want 1 and 0", s, c)
	}
	if len(o.reported) != 0 || o.checks[NotConfirmed] != 1 {
		t.Errorf("reported %v, checks %v; want nothing reported, one NotConfirmed", o.reported, o.checks)
	}

	// Another scheduler wrote the same device into "second": now it is real.
	a["ns/second"] = claim("second", true)
	for range 2 {
		if err := checker.check(ctx, pool); err != nil {
			t.Fatalf("check: %v", err)
		}
	}
	cache.Sync()
	if s, c := conflictsIn(cache); s != 1 || c != 1 {
		t.Errorf("suspected %d, confirmed %d; want 1 and 1", s, c)
	}
	if len(o.reported) != 1 || o.reported[0].Kind != drausage.OverAllocatedDevice {
		t.Errorf("reported %+v, want the over-allocated device once", o.reported)
	}

	// The conflict ends: the confirmation goes with it, and a new one is
	// checked again.
	cache.PendingAllocationRemoved("uid-second")
	cache.Sync()
	if s, c := conflictsIn(cache); s != 0 || c != 0 {
		t.Errorf("after the conflict ended: suspected %d, confirmed %d; want 0 and 0", s, c)
	}
	a["ns/second"] = claim("second", false)
	cache.PendingAllocation(claim("second", true))
	cache.Sync()
	if s, c := conflictsIn(cache); s != 1 || c != 0 {
		t.Errorf("a conflict back again: suspected %d, confirmed %d; want 1 and 0 until checked", s, c)
	}
}

// A claim deleted, or deleted and re-created under the same name, no longer
// takes part.
func TestGoneClaimsDoNotConfirm(t *testing.T) {
	cache := cacheWithGPUs("gpu-0")
	cache.SetClaim(claim("first", true))
	cache.SetClaim(claim("second", true))
	cache.SetClaim(claim("third", true))
	cache.Sync()
	recreated := claim("second", true)
	recreated.UID = "uid-second-new"
	a := api{"ns/first": claim("first", true), "ns/second": recreated}
	checker, o := newChecker(cache, a)
	if err := checker.check(context.Background(), pool); err != errUnconfirmed {
		t.Fatalf("check: %v, want errUnconfirmed", err)
	}
	if len(o.reported) != 0 {
		t.Errorf("reported %+v: only one of the claims still holds the device", o.reported)
	}
}

// Claims read one after another may not have held their devices at the
// same moment: a claim that changed between two reads confirms nothing.
func TestClaimsChangedBetweenReadsDoNotConfirm(t *testing.T) {
	cache := cacheWithGPUs("gpu-0")
	cache.SetClaim(claim("first", true))
	cache.SetClaim(claim("second", true))
	cache.Sync()
	a := api{"ns/first": claim("first", true), "ns/second": claim("second", true)}
	reads := 0
	moving := func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
		c, err := a.get(ctx, namespace, name)
		if reads++; err == nil && reads > 2 {
			c.ResourceVersion = "2" // written again since the first read
		}
		return c, err
	}
	checker := New(cache, moving, Options{})
	if err := checker.check(context.Background(), pool); err != errUnconfirmed {
		t.Fatalf("check: %v, want errUnconfirmed", err)
	}
	cache.Sync()
	if s, c := conflictsIn(cache); s != 1 || c != 0 {
		t.Errorf("suspected %d, confirmed %d; want 1 and 0", s, c)
	}
}

// A pool checked again only when what is unconfirmed changes: recomputes
// that leave it as it was wait for the backoff.
func TestPoolsAreQueuedWhenTheirUnconfirmedConflictsChange(t *testing.T) {
	cache := cacheWithGPUs("gpu-0", "gpu-1")
	checker := New(cache, api{}.get, Options{})
	defer checker.queue.ShutDown()
	cache.Subscribe(checker.changed)
	cache.SetClaim(claim("first", true))
	cache.SetClaim(claim("second", true))
	cache.Sync()
	if n := checker.queue.Len(); n != 1 {
		t.Fatalf("queued %d pools after a new conflict, want 1", n)
	}
	id, _ := checker.queue.Get()
	checker.queue.Done(id)

	// Another claim, on another device: the same conflict, not queued again.
	other := claim("third", true)
	other.Status.Allocation.Devices.Results[0].Device = "gpu-1"
	cache.SetClaim(other)
	cache.Sync()
	if n := checker.queue.Len(); n != 0 {
		t.Errorf("queued %d pools although the unconfirmed conflicts did not change", n)
	}

	// A third holder of gpu-0 changes it.
	cache.PendingAllocation(claim("fourth", true))
	cache.Sync()
	if n := checker.queue.Len(); n != 1 {
		t.Errorf("queued %d pools after a claim joined the conflict, want 1", n)
	}
}
