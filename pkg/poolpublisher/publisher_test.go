package poolpublisher

import (
	"context"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned/fake"
	"github.com/drascope/drascope/pkg/poolcache"
)

// The publisher's sync logic on a fake clientset: what it writes for a
// pool that appears, changes and goes, what it does with an object nobody
// wants, and that its own writes, coming back through its watch, cause no
// write. What only the apiserver does (the status subresource, the CRD's
// schema, a missing CRD) is tested in test/integration.

const testDriver = "gpu.example.com"

func testSlice(pool string, devices int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: testDriver,
			Pool:   resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: "gpu-" + string(rune('a'+i))})
	}
	return s
}

// writeLog counts the publisher's writes by verb.
type writeLog struct {
	mu    sync.Mutex
	verbs map[string]int
}

func (w *writeLog) record(action clienttesting.Action) (bool, runtime.Object, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	verb := action.GetVerb()
	if action.GetSubresource() != "" {
		verb += "/" + action.GetSubresource()
	}
	w.verbs[verb]++
	return false, nil, nil
}

func (w *writeLog) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.verbs {
		n += c
	}
	return n
}

func startPublisher(t *testing.T, cache *poolcache.Cache, objects ...runtime.Object) (*fake.Clientset, *writeLog) {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	log := &writeLog{verbs: map[string]int{}}
	for _, verb := range []string{"create", "update", "delete"} {
		client.PrependReactor(verb, "resourcepools", log.record)
	}
	// The fake assigns no UIDs; the server does, and the publisher tells
	// objects apart by them.
	client.PrependReactor("create", "resourcepools", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if rp, ok := action.(clienttesting.CreateAction).GetObject().(*v1alpha1.ResourcePool); ok && rp.UID == "" {
			rp.UID = uuid.NewUUID()
		}
		return false, nil, nil
	})
	p := New(cache, client, Options{MinInterval: 10 * time.Millisecond, MaxDelay: time.Second, DeviceHealthPolicy: "Taint", Synced: func() bool { return true }})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return client, log
}

func waitForObject(t *testing.T, client *fake.Clientset, name, want string, ok func(*v1alpha1.ResourcePool, error) bool) {
	t.Helper()
	var last *v1alpha1.ResourcePool
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		rp, err := client.DrascopeV1alpha1().ResourcePools().Get(ctx, name, metav1.GetOptions{})
		last = rp
		return ok(rp, err), nil
	})
	if err != nil {
		t.Fatalf("ResourcePool %s: %s; last seen %+v", name, want, last)
	}
}

func totalIs(n int32) func(*v1alpha1.ResourcePool, error) bool {
	return func(rp *v1alpha1.ResourcePool, err error) bool {
		return err == nil && rp.Status.Summary != nil && rp.Status.Summary.TotalDevices == n
	}
}

func TestPublisherFollowsAPool(t *testing.T) {
	cache := poolcache.New(poolcache.Options{})
	cache.SetSlice(testSlice("node-1", 2))
	cache.Sync()
	client, log := startPublisher(t, cache)
	name, _ := v1alpha1.PlainName(testDriver, "node-1")

	waitForObject(t, client, name, "created with 2 devices", totalIs(2))
	if log.verbs["create"] != 1 || log.total() != 1 {
		t.Errorf("writes %v, want one create carrying the status", log.verbs)
	}
	cache.SetSlice(testSlice("node-1", 3))
	cache.Sync()
	waitForObject(t, client, name, "updated to 3 devices", totalIs(3))

	// Its own writes come back through its watch: nothing more is written.
	settled := log.total()
	time.Sleep(300 * time.Millisecond)
	if got := log.total(); got != settled {
		t.Errorf("%d writes with nothing changed (after %d): %v", got-settled, settled, log.verbs)
	}

	cache.DeleteSlice(testSlice("node-1", 3))
	cache.Sync()
	waitForObject(t, client, name, "deleted with its pool", func(_ *v1alpha1.ResourcePool, err error) bool { return err != nil })
}

// An object of a pool the cache does not have (left by an earlier
// configuration, or made by hand) is deleted once the cache has synced.
func TestPublisherDeletesOrphans(t *testing.T) {
	cache := poolcache.New(poolcache.Options{})
	name, _ := v1alpha1.PlainName(testDriver, "gone")
	orphan := &v1alpha1.ResourcePool{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-orphan"}, Spec: v1alpha1.ResourcePoolSpec{Driver: testDriver, PoolName: "gone"}}
	client, log := startPublisher(t, cache, orphan)
	waitForObject(t, client, name, "deleted as an orphan", func(_ *v1alpha1.ResourcePool, err error) bool { return err != nil })
	if log.verbs["delete"] != 1 || log.total() != 1 {
		t.Errorf("writes %v, want one delete", log.verbs)
	}
}
