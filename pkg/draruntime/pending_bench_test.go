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
	indexer := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	claimIndex, classIndex := indexer(), indexer()
	followed := newPodsWithClaims()
	for i := range classes {
		if err := classIndex.Add(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("class-%d", i)}}); err != nil {
			tb.Fatal(err)
		}
	}
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
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: fmt.Sprintf("class-%d", i%classes)},
			}}}},
		}
		if i >= pending {
			pod.Spec.NodeName = fmt.Sprintf("node-%d", i/8)
			pod.Status.Phase = v1.PodRunning
			claim.Status.Allocation = &resourceapi.AllocationResult{}
		}
		followed.set(pod)
		if err := claimIndex.Add(claim); err != nil {
			tb.Fatal(err)
		}
	}
	return &metricsSource{
		r:       &Runtime{profiles: sets.New("drascope-scheduler")},
		pods:    followed,
		claims:  resourcelisters.NewResourceClaimLister(claimIndex),
		classes: resourcelisters.NewDeviceClassLister(classIndex),
	}
}
