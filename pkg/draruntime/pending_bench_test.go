package draruntime

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// BenchmarkMetricsScrape is what one scrape of the pending-pods and
// pods-with-claims gauges costs on a cluster of many running pods with
// claims and a few pending ones. Production scrapes every 15-30 s;
// scheduler_perf gathers the registry every second.
func BenchmarkMetricsScrape(b *testing.B) {
	for _, pods := range []int{5000, 50000} {
		b.Run(fmt.Sprintf("%dpods_200pending", pods), func(b *testing.B) {
			s := scrapeSource(b, pods, 200, 20)
			b.ReportAllocs()
			for b.Loop() {
				s.PendingPodsByDeviceClass()
				s.PodsWithClaimsByScheduler()
			}
		})
	}
}

// scrapeSource is a metrics source over pods pods of drascope-scheduler,
// each with a claim of one of classes device classes; the first pending are
// unbound and their claims unallocated.
func scrapeSource(tb testing.TB, pods, pending, classes int) *metricsSource {
	tb.Helper()
	var names []string
	for i := range classes {
		names = append(names, fmt.Sprintf("class-%d", i))
	}
	s, claims := testSource(tb, []string{"drascope-scheduler"}, names...)
	for i := range pods {
		name := fmt.Sprintf("pod-%d", i)
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec: v1.PodSpec{
				SchedulerName:  "drascope-scheduler",
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
			},
			Status: v1.PodStatus{Phase: v1.PodPending},
		}
		claim := claimOf(name, names[i%classes])
		if i >= pending {
			pod.Spec.NodeName = fmt.Sprintf("node-%d", i/8)
			pod.Status.Phase = v1.PodRunning
			claim.Status.Allocation = &resourceapi.AllocationResult{}
		}
		s.pods.set(pod)
		if err := claims.Add(claim); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// testSource is a metrics source for the profiles, with pods followed from
// what the test passes to its pods.set and pods.remove, the device classes
// named, and the claims the test adds to the returned indexer.
func testSource(tb testing.TB, profiles []string, classes ...string) (*metricsSource, cache.Indexer) {
	tb.Helper()
	claimIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	classIndex := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, class := range classes {
		if err := classIndex.Add(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: class}}); err != nil {
			tb.Fatal(err)
		}
	}
	return &metricsSource{
		r:       &Runtime{profiles: sets.New(profiles...)},
		pods:    newPodsWithClaims(),
		claims:  resourcelisters.NewResourceClaimLister(claimIndex),
		classes: resourcelisters.NewDeviceClassLister(classIndex),
	}, claimIndex
}

// claimOf is an unallocated claim in namespace ns asking for one device of
// class.
func claimOf(name, class string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class},
		}}}},
	}
}
