package integration

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/util/retry"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolpublisher"
)

// A slice appears and its ResourcePool is created; an allocation changes the
// summary, admin access does not, releasing the claim changes it back, and
// deleting the last slice deletes the object.
func TestResourcePoolLifecycle(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpus", 2)
	name := poolObjectName(t, node)

	rp := s.waitForResourcePool(name, "2 available devices", summaryIs(2, 0, 2, 0))
	if rp.Spec != (v1alpha1.ResourcePoolSpec{Driver: driverName, PoolName: node, NodeName: node}) {
		t.Errorf("spec %+v, want driver %s, pool and node %s", rp.Spec, driverName, node)
	}
	if rp.Status.ObservedSliceCount != 1 || rp.Status.ExpectedSliceCount != 1 || rp.Status.ObservedGeneration != 1 || rp.Status.LastUpdateTime == nil {
		t.Errorf("status %+v: want 1 of 1 slices at generation 1 and a lastUpdateTime", rp.Status)
	}
	for _, typ := range []string{v1alpha1.ConditionComplete, v1alpha1.ConditionValid} {
		if !conditionIs(typ, metav1.ConditionTrue)(rp) {
			t.Errorf("condition %s not True: %+v", typ, rp.Status.Conditions)
		}
	}

	s.addClaimTemplate("gpu", false)
	s.addClaimTemplate("gpu-admin", true)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("trainer")
	s.waitForResourcePool(name, "1 allocated device", summaryIs(2, 1, 1, 0))

	s.addPod("monitor", schedulerName, fromTemplate("gpu-admin"))
	s.waitForPodScheduled("monitor")
	// The admin claim is allocated too, and still nothing more is counted.
	if rp := s.waitForResourcePool(name, "1 allocated device", summaryIs(2, 1, 1, 0)); rp.Status.Summary.AllocatedDevices != 1 {
		t.Fatal("unreachable")
	}

	// Deleting the pod lets the resourceclaim controller delete its claim.
	if err := env.client.CoreV1().Pods(s.namespace).Delete(s.ctx, "trainer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	s.waitForResourcePool(name, "the device released", summaryIs(2, 0, 2, 0))

	if err := env.client.ResourceV1().ResourceSlices().Delete(s.ctx, sliceName(node), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitForResourcePoolGone(name)
}

// Several slices of one pool aggregate; a missing slice gives Complete=False;
// duplicate device names give Valid=False with the message. The pool is not
// tied to a node (network-attached devices).
func TestResourcePoolSlicesAndValidation(t *testing.T) {
	s := newScenario(t, nil)
	pool := s.namespace + "-fabric"
	name := poolObjectName(t, pool)
	spec := resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 2}

	s.addSlice(pool+"-0", spec, nil, gpuNames(0, 2)...)
	rp := s.waitForResourcePool(name, "Complete=False", conditionIs(v1alpha1.ConditionComplete, metav1.ConditionFalse))
	if c := meta.FindStatusCondition(rp.Status.Conditions, v1alpha1.ConditionComplete); c.Reason != "SlicesMissing" || !strings.Contains(c.Message, "1 of 2 slices") {
		t.Errorf("Complete condition %+v: want reason SlicesMissing and the slice counts", c)
	}
	if rp.Spec.NodeName != "" {
		t.Errorf("a pool of AllNodes slices got nodeName %q", rp.Spec.NodeName)
	}

	s.addSlice(pool+"-1", spec, nil, gpuNames(2, 5)...)
	s.waitForResourcePool(name, "both slices aggregated", func(rp *v1alpha1.ResourcePool) bool {
		return conditionIs(v1alpha1.ConditionComplete, metav1.ConditionTrue)(rp) && summaryIs(5, 0, 5, 0)(rp) && rp.Status.ObservedSliceCount == 2
	})

	dupPool := s.namespace + "-dup"
	dupSpec := resourceapi.ResourcePool{Name: dupPool, Generation: 1, ResourceSliceCount: 2}
	s.addSlice(dupPool+"-0", dupSpec, nil, "gpu-0", "gpu-1")
	s.addSlice(dupPool+"-1", dupSpec, nil, "gpu-1")
	rp = s.waitForResourcePool(poolObjectName(t, dupPool), "Valid=False", conditionIs(v1alpha1.ConditionValid, metav1.ConditionFalse))
	if len(rp.Status.ValidationErrors) != 1 || !strings.Contains(rp.Status.ValidationErrors[0], `device "gpu-1" is published by slices`) {
		t.Errorf("validationErrors %q: want one naming the duplicate device gpu-1", rp.Status.ValidationErrors)
	}
	if rp.Status.Summary.TotalDevices != 2 {
		t.Errorf("a duplicated device was counted twice: total %d", rp.Status.Summary.TotalDevices)
	}

	// A resourceSliceCount past int32 (the API only asks for > 0): the
	// pool is invalid and incomplete, and its status is written all the
	// same; the CRD's minimum: 0 would refuse a count turned negative.
	hugePool := s.namespace + "-huge"
	s.addSlice(hugePool+"-0", resourceapi.ResourcePool{Name: hugePool, Generation: 1, ResourceSliceCount: 1 << 31}, nil, "gpu-0")
	rp = s.waitForResourcePool(poolObjectName(t, hugePool), "Valid=False", conditionIs(v1alpha1.ConditionValid, metav1.ConditionFalse))
	if rp.Status.ExpectedSliceCount != math.MaxInt32 || !slices.ContainsFunc(rp.Status.ValidationErrors, func(e string) bool {
		return strings.Contains(e, "resourceSliceCount 2147483648")
	}) {
		t.Errorf("expectedSliceCount %d, validationErrors %q: want %d and the count named", rp.Status.ExpectedSliceCount, rp.Status.ValidationErrors, math.MaxInt32)
	}
}

// Two claims written with the same device, as a racing second scheduler
// would, give Valid=False naming the device (not the claims), a Warning
// event on the pool's ResourceSlice, and a metric.
func TestResourcePoolAllocationConflict(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	name := poolObjectName(t, node)
	s.addClaim("first-secret-claim", false)
	s.addClaim("second-secret-claim", false)
	s.allocateDirectly("first-secret-claim", node, "gpu-0")
	s.allocateDirectly("second-secret-claim", node, "gpu-0")

	rp := s.waitForResourcePool(name, "Valid=False", conditionIs(v1alpha1.ConditionValid, metav1.ConditionFalse))
	if len(rp.Status.ValidationErrors) != 1 {
		t.Fatalf("validationErrors %q: want one", rp.Status.ValidationErrors)
	}
	msg := rp.Status.ValidationErrors[0]
	if !strings.Contains(msg, driverName+"/"+node+"/gpu-0") || strings.Contains(msg, "secret") {
		t.Errorf("conflict message %q must name the device and no claim", msg)
	}
	if !summaryIs(2, 1, 1, 0)(rp) {
		t.Errorf("summary %+v: the conflicted device counts once", rp.Status.Summary)
	}

	if c := rp.Status.Conflicts; c == nil || c.OverAllocatedDevices != 1 || c.OverConsumedCapacity != 0 || c.OverConsumedCounters != 0 {
		t.Errorf("status.conflicts %+v, want one over-allocated device", c)
	}
	s.waitForConflictEvent(sliceName(node), "gpu-0", "confirmed from the API")
	if got := scrapeGauge(t, "drascope_resourcepool_allocation_conflicts", map[string]string{"pool": node, "kind": "OverAllocatedDevice"}); got != 1 {
		t.Errorf("drascope_resourcepool_allocation_conflicts for pool %s = %v, want 1", node, got)
	}

	// The conflict ends when one claim goes; so does Valid=False.
	if err := env.client.ResourceV1().ResourceClaims(s.namespace).Delete(s.ctx, "second-secret-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitForResourcePool(name, "Valid=True", conditionIs(v1alpha1.ConditionValid, metav1.ConditionTrue))
	if err := env.client.ResourceV1().ResourceClaims(s.namespace).Delete(s.ctx, "first-secret-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A burst of 200 allocations in one pool causes far fewer ResourcePool
// writes than allocations: while the pool keeps changing, at most one per
// half of poolStatus.maxPublishDelay (5s in the shipped config), plus the
// first and the one after the burst.
func TestResourcePoolWritesAreCoalesced(t *testing.T) {
	const allocations = 200
	s := newScenario(t, nil)
	// A slice holds at most 128 devices: two slices of 100.
	node := s.addNode("gpus", 0)
	pool := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	s.addSlice(node+"-a", pool, &node, gpuNames(0, allocations/2)...)
	s.addSlice(node+"-b", pool, &node, gpuNames(allocations/2, allocations)...)
	name := poolObjectName(t, node)
	// Read before any write the watch below can see; a counter not yet
	// written is absent (-1) and counts as 0.
	updatesBefore := max(0, scrapeGauge(t, "drascope_resourcepool_writes_total", map[string]string{"verb": "update"}))
	ready := s.waitForResourcePool(name, "all devices available", summaryIs(allocations, 0, allocations, 0))

	// From the version just read, so that only writes after it count.
	watcher, err := resourcePools(t).Watch(s.ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + name,
		ResourceVersion: ready.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Stop()
	writes := 0
	// seenAt[k]: when a write first showed at least k+1 allocated devices.
	seenAt := make([]time.Time, allocations)
	var watchErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for event := range watcher.ResultChan() {
			rp, ok := event.Object.(*v1alpha1.ResourcePool)
			if event.Type != watch.Modified || !ok {
				continue
			}
			writes++
			for k := 0; k < int(rp.Status.Summary.AllocatedDevices) && k < allocations; k++ {
				if seenAt[k].IsZero() {
					seenAt[k] = time.Now()
				}
			}
			if summaryIs(allocations, allocations, 0, 0)(rp) {
				return
			}
		}
		watchErr = fmt.Errorf("the watch ended after %d writes", writes)
	}()

	start := time.Now()
	writtenAt := make([]time.Time, allocations)
	for i := range allocations {
		claim := fmt.Sprintf("claim-%d", i)
		s.addClaim(claim, false)
		s.allocateDirectly(claim, node, fmt.Sprintf("gpu-%d", i))
		writtenAt[i] = time.Now()
	}
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatalf("the ResourcePool did not reach %d allocated devices within %v", allocations, waitTimeout)
	}
	if watchErr != nil {
		t.Fatalf("watching ResourcePool %s: %v", name, watchErr)
	}
	elapsed := time.Since(start)
	// The publisher may write once right away, once per half of the
	// delay while the pool keeps changing, and once when it stops.
	bound := int(elapsed/(5*time.Second)) + 2
	t.Logf("%d allocations over %v caused %d ResourcePool writes", allocations, elapsed.Round(time.Millisecond), writes)
	// The counter covers every pool of the shared scheduler, so it reaches
	// at least the writes seen here. It may trail the watch: the apiserver
	// answers the scheduler's write and tells the watch at the same time.
	var counted float64
	err = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		counted = scrapeGauge(t, "drascope_resourcepool_writes_total", map[string]string{"verb": "update"}) - updatesBefore
		return counted >= float64(writes), nil
	})
	if err != nil {
		t.Errorf("drascope_resourcepool_writes_total{verb=update} grew by %v; the watch saw %d writes", counted, writes)
	}
	if writes > bound || writes >= allocations/4 {
		t.Errorf("%d allocations over %v caused %d ResourcePool writes; want at most %d (one per 5s) and far fewer than %d", allocations, elapsed, writes, bound, allocations)
	}
	// Figures for docs/resourcepools.md, measured, not asserted: from each
	// claim status write to the first ResourcePool write showing it, and the
	// scheduler's own histograms.
	delays := make([]time.Duration, allocations)
	for i := range delays {
		delays[i] = seenAt[i].Sub(writtenAt[i])
	}
	slices.Sort(delays)
	t.Logf("claim status write -> ResourcePool shows it (end to end, a pool that keeps changing): p50 %v, p99 %v",
		delays[allocations/2].Round(time.Millisecond), delays[allocations*99/100].Round(time.Millisecond))
	for _, name := range []string{"drascope_resourcepool_snapshot_delay_seconds", "drascope_resourcepool_publish_delay_seconds"} {
		p50, p99, count := scrapeHistogramQuantiles(t, name)
		t.Logf("%s over %d observations in this test process: p50 <= %v, p99 <= %v (bucket bounds)", name, count, p50, p99)
	}
	if err := env.client.ResourceV1().ResourceClaims(s.namespace).DeleteCollection(s.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A scheduler restart converges to the same objects (same UIDs, not
// recreated), deletes the object of a pool that went away meanwhile, and
// deletes orphans it never made.
func TestResourcePoolsAfterSchedulerRestart(t *testing.T) {
	s := newScenario(t, nil)
	stays := s.addNode("stays", 1)
	goes := s.addNode("goes", 1)
	staysName, goesName := poolObjectName(t, stays), poolObjectName(t, goes)
	before := s.waitForResourcePool(staysName, "created", summaryIs(1, 0, 1, 0))
	s.waitForResourcePool(goesName, "created", summaryIs(1, 0, 1, 0))

	restartScheduler(t, func() {
		if err := env.client.ResourceV1().ResourceSlices().Delete(s.ctx, sliceName(goes), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		orphan := &v1alpha1.ResourcePool{
			ObjectMeta: metav1.ObjectMeta{Name: s.namespace + ".orphan"},
			Spec:       v1alpha1.ResourcePoolSpec{Driver: driverName, PoolName: s.namespace + "-never-existed"},
		}
		if _, err := resourcePools(t).Create(s.ctx, orphan, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	s.waitForResourcePoolGone(goesName)
	s.waitForResourcePoolGone(s.namespace + ".orphan")
	after := s.waitForResourcePool(staysName, "still there", summaryIs(1, 0, 1, 0))
	if after.UID != before.UID {
		t.Errorf("ResourcePool %s was recreated across the restart (UID %s -> %s)", staysName, before.UID, after.UID)
	}
}

// Metrics scraped from the scheduler's /metrics match the ResourcePool.
func TestMetricsMatchResourcePools(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 3)
	name := poolObjectName(t, node)
	s.addClaimTemplate("gpu", false)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("trainer")
	rp := s.waitForResourcePool(name, "1 allocated device", summaryIs(3, 1, 2, 0))

	for state, want := range map[string]int32{
		"Available":          rp.Status.Summary.AvailableDevices,
		"Allocated":          rp.Status.Summary.AllocatedDevices,
		"Unavailable":        rp.Status.Summary.UnavailableDevices,
		"PartiallyAllocated": rp.Status.Summary.PartiallyAllocatedDevices,
	} {
		labels := map[string]string{"driver": driverName, "pool": node, "node": node, "state": state}
		if got := scrapeGauge(t, "drascope_resourcepool_devices", labels); got != float64(want) {
			t.Errorf("drascope_resourcepool_devices%v = %v, ResourcePool says %d", labels, got, want)
		}
	}
	if got := scrapeGauge(t, "resourcepool_controller_pools_total", nil); got < 1 {
		t.Errorf("resourcepool_controller_pools_total = %v, want at least this test's pool", got)
	}
}

// Without the CRD the scheduler says so once, clearly, and keeps scheduling.
func TestSchedulingWithoutTheResourcePoolCRD(t *testing.T) {
	crds, err := apiextensionsclient.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	const crdName = "resourcepools.drascope.dev"
	logBefore := schedulerLogLength(t)
	restartScheduler(t, func() {
		if err := crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crdName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("CRD %s was not deleted", crdName)
		}
	})
	// Put the CRD back, under a scheduler that will find it at start; on
	// failure too, for the tests that follow.
	crdBack := false
	reinstall := func() {
		restartScheduler(t, func() {
			if err := env.cp.ApplyFile(context.Background(), filepath.Join(crdsDir, "resourcepools.drascope.dev.yaml")); err != nil {
				t.Fatalf("reinstalling the CRD: %v", err)
			}
		})
		crdBack = true
	}
	t.Cleanup(func() {
		if !crdBack {
			reinstall()
		}
	})

	s := newScenario(t, nil)
	node := s.addNode("gpus", 1)
	s.addClaimTemplate("gpu", false)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("trainer")

	var warnings int
	err = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		warnings = strings.Count(schedulerLogSince(t, logBefore), crdMissingWarning)
		return warnings > 0, nil
	})
	if err != nil {
		t.Fatalf("the scheduler log has no %q", crdMissingWarning)
	}
	// A second pool change must not repeat it.
	more := s.addNode("more", 1)
	s.addPod("trainer-2", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("trainer-2")

	// kubectl dra computes the same numbers client side, and says so.
	out, errOut, err := kubectlDRA(t, "pools", "--node", more)
	if err != nil {
		t.Fatalf("kubectl dra pools without the CRD: %v", err)
	}
	t.Logf("kubectl dra pools --node %s (CRD missing)\n%s%s", more, errOut, out)
	if !strings.Contains(errOut, "(the ResourcePool CRD is not installed: computed from ResourceSlices and ResourceClaims)") {
		t.Errorf("stderr %q does not say the numbers were computed", errOut)
	}
	if got := rows(out); len(got) != 2 || strings.Join(got[1][1:], " ") != driverName+" "+more+" "+more+" 1 1 0 0" {
		t.Errorf("computed rows %q, want the pool with its one device allocated", got)
	}
	if warnings = strings.Count(schedulerLogSince(t, logBefore), crdMissingWarning); warnings != 1 {
		t.Errorf("the warning appeared %d times, want once", warnings)
	}

	reinstall()
	s.waitForResourcePool(poolObjectName(t, node), "published once the CRD is back", summaryIs(1, 1, 0, 0))
}

// A publisher that loses its lease and later gets it back publishes again:
// each term starts afresh. The publisher here is fed by a cache of its own,
// for a driver the scheduler does not know. It runs while the in-process
// scheduler is stopped: each publisher owns every ResourcePool, so the two
// would delete each other's objects as orphans.
func TestPublisherServesASecondTerm(t *testing.T) {
	s := newScenario(t, nil)
	const testDriver = "terms.example.com"
	pool := s.namespace
	cache := poolcache.New(poolcache.Options{})
	slice := func(devices int) *resourceapi.ResourceSlice { return wholePoolSlice(testDriver, pool, devices) }
	client, err := versioned.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	publisher := poolpublisher.New(cache, client, poolpublisher.Options{MinInterval: 100 * time.Millisecond})
	name, _ := v1alpha1.PlainName(testDriver, pool)
	t.Cleanup(func() { _ = resourcePools(t).Delete(context.Background(), name, metav1.DeleteOptions{}) })

	term := func(devices int32) {
		ctx, cancel := context.WithCancel(s.ctx)
		done := make(chan struct{})
		go func() { defer close(done); publisher.Run(ctx) }()
		s.waitForResourcePool(name, fmt.Sprintf("%d devices", devices), summaryIs(devices, 0, devices, 0))
		cancel()
		<-done
	}
	restartScheduler(t, func() {
		cache.SetSlice(slice(2))
		cache.Sync()
		term(2)

		// Changes while not holding the lease are published in the next term.
		cache.SetSlice(slice(3))
		cache.Sync()
		term(3)
	})
}

// A publisher whose write budget is far below the load still writes every
// change by its deadline, and no change is lost. 12 new pools are created
// at the pace of the creations' budget (one a second), none past it; then
// all 12 change at once: the budget has a token a second, the changes are
// due after at most 2s, so all but the writes the budget allows go past
// it. A change that lands just after a pool's write, with nothing after
// it, is written too (a lost change would wait for the next
// change forever). A pool that changes later, quiet, with the budget's
// token back, is written within the budget. Like
// TestPublisherServesASecondTerm, it runs with the scheduler stopped.
func TestPublisherWritesDuePoolsPastTheBudget(t *testing.T) {
	s := newScenario(t, nil)
	const testDriver = "due.example.com"
	const pools = 12
	cache := poolcache.New(poolcache.Options{})
	slice := func(i, devices int) *resourceapi.ResourceSlice {
		return wholePoolSlice(testDriver, fmt.Sprintf("%s-%d", s.namespace, i), devices)
	}
	name := func(i int) string {
		n, _ := v1alpha1.PlainName(testDriver, fmt.Sprintf("%s-%d", s.namespace, i))
		return n
	}
	client, err := versioned.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	var due, published, created atomic.Int32
	publisher := poolpublisher.New(cache, client, poolpublisher.Options{
		MinInterval:        100 * time.Millisecond,
		MaxWritesPerSecond: 1,
		MaxDelay:           2 * time.Second,
		ObserveOverBudget:  func() { due.Add(1) },
		ObservePublished: func(_ time.Duration, first bool) {
			if first {
				created.Add(1)
			} else {
				published.Add(1)
			}
		},
	})
	t.Cleanup(func() {
		for i := range pools {
			_ = resourcePools(t).Delete(context.Background(), name(i), metav1.DeleteOptions{})
		}
	})

	restartScheduler(t, func() {
		ctx, cancel := context.WithCancel(s.ctx)
		done := make(chan struct{})
		go func() { defer close(done); publisher.Run(ctx) }()
		defer func() { cancel(); <-done }()

		for i := range pools {
			cache.SetSlice(slice(i, 2))
		}
		cache.Sync()
		for i := range pools {
			s.waitForResourcePool(name(i), "2 devices", summaryIs(2, 0, 2, 0))
		}
		if got := created.Load(); got != pools {
			t.Errorf("%d first publications observed, want one per pool, %d", got, pools)
		}
		if got := due.Load(); got != 0 {
			t.Errorf("%d first publications went past the budget; want none: they are paced apart", got)
		}

		// Every pool changes at once: within the budget the 12 writes would
		// take 11s; they are due within 2s.
		for i := range pools {
			cache.SetSlice(slice(i, 3))
		}
		cache.Sync()
		for i := range pools {
			s.waitForResourcePool(name(i), "3 devices", summaryIs(3, 0, 3, 0))
		}
		if got := due.Load(); got < pools/2 {
			t.Errorf("%d of %d writes went past the budget; want at least half: the changes were due long before the budget had tokens for them", got, pools)
		}
		if got := published.Load(); got != pools {
			t.Errorf("%d status writes observed as published, want one per pool, %d", got, pools)
		}

		// A change right after pool 1's write, and nothing after it.
		cache.SetSlice(slice(1, 4))
		cache.Sync()
		s.waitForResourcePool(name(1), "4 devices", summaryIs(4, 0, 4, 0))
		cache.SetSlice(slice(1, 5))
		cache.Sync()
		s.waitForResourcePool(name(1), "5 devices, changed just after the write of 4", summaryIs(5, 0, 5, 0))

		// Quiet again: the budget's token is back after a second, and one
		// change is written within it, not past it.
		time.Sleep(1500 * time.Millisecond)
		before := due.Load()
		cache.SetSlice(slice(0, 4))
		cache.Sync()
		s.waitForResourcePool(name(0), "4 devices", summaryIs(4, 0, 4, 0))
		if got := due.Load(); got != before {
			t.Errorf("a single change on a quiet publisher made %d writes past the budget, want none", got-before)
		}
	})
}

// wholePoolSlice is the one slice, named after it, of a pool of devices
// reachable from all nodes: what a publisher fed by a cache of its own
// needs, without a node.
func wholePoolSlice(driver, pool string, devices int) *resourceapi.ResourceSlice {
	sl := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec:       resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1}, AllNodes: ptr.To(true)},
	}
	for _, d := range gpuNames(0, devices) {
		sl.Spec.Devices = append(sl.Spec.Devices, resourceapi.Device{Name: d})
	}
	return sl
}

// A ResourcePool deleted or edited by hand is put back: the publisher
// watches the objects it writes.
func TestResourcePoolRepairedAfterHandEdits(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	name := poolObjectName(t, node)
	before := s.waitForResourcePool(name, "created", summaryIs(2, 0, 2, 0))

	if err := resourcePools(t).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	back := s.waitForResourcePool(name, "created again after a hand delete", func(rp *v1alpha1.ResourcePool) bool {
		return rp.UID != before.UID && summaryIs(2, 0, 2, 0)(rp)
	})

	edited := back.DeepCopy()
	edited.Status.Summary = &v1alpha1.PoolSummary{TotalDevices: 2, AllocatedDevices: 2}
	if _, err := resourcePools(t).Update(s.ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitForResourcePool(name, "its status restored after a hand edit", func(rp *v1alpha1.ResourcePool) bool {
		return rp.UID == back.UID && summaryIs(2, 0, 2, 0)(rp)
	})
}

// A new pool's object is created with its status, in one request: a
// watcher (kubectl get -w, a dashboard) never sees it empty, and the first
// publication of N pools costs the apiserver N writes, not 2N. A CRD with a
// status subresource would drop the status on create.
func TestNewResourcePoolAppearsWithItsStatus(t *testing.T) {
	s := newScenario(t, nil)
	list, err := resourcePools(t).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := resourcePools(t).Watch(s.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	name := poolObjectName(t, s.addNode("gpus", 2))
	first := firstEventFor(t, w, name)
	rp, _ := first.Object.(*v1alpha1.ResourcePool)
	if first.Type != watch.Added || rp == nil || !summaryIs(2, 0, 2, 0)(rp) || rp.Generation != 1 {
		t.Fatalf("first event for ResourcePool %s: %s %+v; want it added with 2 available devices, at generation 1 (one write)", name, first.Type, first.Object)
	}
}

// firstEventFor returns the first event of a watch on ResourcePools that
// names the object.
func firstEventFor(t *testing.T, w watch.Interface, name string) watch.Event {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended before ResourcePool %s appeared", name)
			}
			if rp, isPool := ev.Object.(*v1alpha1.ResourcePool); isPool && rp.Name == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("ResourcePool %s did not appear within %s; scheduler log: %s", name, waitTimeout, env.schedulerLog)
		}
	}
}

// A CRD applied from older manifests has a status subresource, here
// added while the scheduler publishes. A pool that existed before finds it
// on its next update (the apiserver keeps the old status), a new pool on
// its create (the apiserver drops the status); the publisher says so
// once, and writes statuses through the subresource. Once the current CRD
// is applied again, a status write finds the subresource gone, and the
// publisher writes whole objects again, in the same term.
func TestPublishingWithAnOlderCRD(t *testing.T) {
	crds, err := apiextensionsclient.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	const crdName = "resourcepools.drascope.dev"
	setStatusSubresource := func(ctx context.Context, on bool) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			crd.Spec.Versions[0].Subresources = nil
			if on {
				crd.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
			}
			_, err = crds.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// The apiserver serves the changed CRD a moment later: a dry-run
		// create shows when a status sent with the object is kept.
		probe := &v1alpha1.ResourcePool{
			ObjectMeta: metav1.ObjectMeta{Name: "probe-status-subresource"},
			Spec:       v1alpha1.ResourcePoolSpec{Driver: driverName, PoolName: "probe"},
			Status:     v1alpha1.ResourcePoolStatus{ObservedSliceCount: 1},
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
			got, err := resourcePools(t).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, nil
			}
			return (got.Status.ObservedSliceCount == 0) == on, nil
		})
		if err != nil {
			t.Fatalf("the apiserver did not start serving the CRD with status subresource %v", on)
		}
	}
	t.Cleanup(func() { setStatusSubresource(context.Background(), false) })

	s := newScenario(t, nil)
	s.addClaimTemplate("gpu", false)
	before := s.addNode("before", 2)
	beforePool := poolObjectName(t, before)
	s.waitForResourcePool(beforePool, "published whole", summaryIs(2, 0, 2, 0))

	logOn := schedulerLogLength(t)
	setStatusSubresource(s.ctx, true)
	s.addPodWith("updated", schedulerName, fromTemplate("gpu"), withNodeName(before))
	s.waitForPodScheduled("updated")
	s.waitForResourcePool(beforePool, "an allocation published through the status subresource", summaryIs(2, 1, 1, 0))
	during := s.addNode("during", 2)
	duringPool := poolObjectName(t, during)
	s.waitForResourcePool(duringPool, "a new pool published through the status subresource", summaryIs(2, 0, 2, 0))
	const said = "The ResourcePool CRD has a status subresource"
	if log := schedulerLogSince(t, logOn); strings.Count(log, said) != 1 {
		t.Errorf("the scheduler log says %q %d times, want once:\n%s", said, strings.Count(log, said), tail(log, 20))
	}

	logOff := schedulerLogLength(t)
	setStatusSubresource(s.ctx, false)
	s.addPodWith("after", schedulerName, fromTemplate("gpu"), withNodeName(during))
	s.waitForPodScheduled("after")
	s.waitForResourcePool(duringPool, "an allocation published once the subresource is gone", summaryIs(2, 1, 1, 0))
	afterPool := poolObjectName(t, s.addNode("after", 2))
	if rp := s.waitForResourcePool(afterPool, "a new pool published whole", summaryIs(2, 0, 2, 0)); rp.Generation != 1 {
		t.Errorf("ResourcePool %s at generation %d, want 1: created in one request", afterPool, rp.Generation)
	}
	log := schedulerLogSince(t, logOff)
	if strings.Contains(log, "was deleted") {
		t.Errorf("the scheduler took the status subresource's removal for the CRD's:\n%s", tail(log, 20))
	}
	if !strings.Contains(log, "no status subresource now") {
		t.Errorf("the scheduler did not say it writes whole objects again:\n%s", tail(log, 20))
	}
}

// (d) of the fault tests (faults_test.go). The CRD deleted while the scheduler publishes: every write would fail the
// same way, so the publisher goes back to waiting for the CRD (and says
// so), scheduling goes on, and once the CRD is back the pools are published
// again, without a restart. The test logs how long that took.
func TestPublishingResumesWhenTheCRDIsBack(t *testing.T) {
	crds, err := apiextensionsclient.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	const crdName = "resourcepools.drascope.dev"
	install := func() error {
		return env.cp.ApplyFile(context.Background(), filepath.Join(crdsDir, "resourcepools.drascope.dev.yaml"))
	}
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	s.addClaimTemplate("gpu", false)
	s.addPod("before", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("before")
	s.waitForResourcePool(poolObjectName(t, node), "published", summaryIs(2, 1, 1, 0))

	logBefore := schedulerLogLength(t)
	if err := crds.ApiextensionsV1().CustomResourceDefinitions().Delete(s.ctx, crdName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), crdName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			if err := install(); err != nil {
				t.Errorf("reinstalling the CRD: %v", err)
			}
		}
	})
	err = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("CRD %s was not deleted", crdName)
	}
	// A pool change makes the publisher write, and find the CRD gone.
	s.addPod("during", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("during")
	const deletedWarning = "the ResourcePool CRD (resourcepools.drascope.dev) was deleted"
	err = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return strings.Contains(schedulerLogSince(t, logBefore), deletedWarning), nil
	})
	if err != nil {
		t.Fatalf("the scheduler log has no %q:\n%s", deletedWarning, tail(schedulerLogSince(t, logBefore), 20))
	}

	if err := install(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	s.waitForResourcePool(poolObjectName(t, node), "published again once the CRD is back", summaryIs(2, 2, 0, 0))
	matched := s.waitForPoolsToMatchTheAPI([]string{node})
	s.checkNoAllocationForPendingPods()
	t.Logf("(d) ResourcePools matched the API %s after the CRD was re-created (the publisher looks for it every second)", since(back, matched))
}

// A pool of thousands of Unhealthy devices with long messages is
// published: the status is bounded by its encoded size, Unavailable devices
// first, the rest counted. The whole list (about 7 MB) would pass the
// apiserver's request limit, be refused on every write, and freeze the
// pool's object. Like TestPublisherServesASecondTerm, it runs with the
// scheduler stopped.
func TestLongHealthMessagesDoNotFreezeAPool(t *testing.T) {
	s := newScenario(t, nil)
	const testDriver = "long.example.com"
	const devices = 3500
	pool := s.namespace
	long := strings.Repeat("Xid 79: GPU has fallen off the bus <", 28) // 1008 bytes, escaped in JSON
	cache := poolcache.New(poolcache.Options{Usage: drausage.Options{
		WithholdUnhealthy: true,
		Health: func(drausage.PoolID, string) drausage.DeviceHealth {
			return drausage.DeviceHealth{Status: v1.ResourceHealthStatusUnhealthy, Detail: long}
		},
	}})
	client, err := versioned.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	publisher := poolpublisher.New(cache, client, poolpublisher.Options{MinInterval: 100 * time.Millisecond, DeviceHealthPolicy: "Taint"})
	name, _ := v1alpha1.PlainName(testDriver, pool)
	t.Cleanup(func() { _ = resourcePools(t).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	restartScheduler(t, func() {
		cache.SetSlice(wholePoolSlice(testDriver, pool, devices))
		cache.Sync()
		ctx, cancel := context.WithCancel(s.ctx)
		done := make(chan struct{})
		go func() { defer close(done); publisher.Run(ctx) }()
		defer func() { cancel(); <-done }()
		rp := s.waitForResourcePool(name, "published, its device list bounded", func(rp *v1alpha1.ResourcePool) bool {
			return rp.Status.Summary != nil && rp.Status.Summary.TotalDevices == devices && rp.Status.TruncatedDeviceCount > 0
		})
		if n := len(rp.Status.Devices) + int(rp.Status.TruncatedDeviceCount); n != devices {
			t.Errorf("%d devices listed and %d counted, want %d in all", len(rp.Status.Devices), rp.Status.TruncatedDeviceCount, devices)
		}
		if d := rp.Status.Devices[0]; d.State != "Unavailable" || d.Health != "Unhealthy" || !strings.Contains(d.HealthMessage, "Xid 79") {
			t.Errorf("first device listed: %+v, want Unavailable and Unhealthy with kubelet's message", d)
		}
	})
}
