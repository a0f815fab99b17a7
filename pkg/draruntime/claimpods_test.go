package draruntime

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/informerevents"
)

// The gauges read from the pods kept from events must equal what listing
// every pod gives (the scrape's former way, kept here as the reference),
// after any sequence of pod events: creations with and without claims,
// bindings, pods running, deletions started, pods finishing, deletes as
// objects or as tombstones, updates repeated, a pod made again under the
// same name while the watch was down, and claims allocated behind the pods'
// backs.
func TestPodsWithClaimsCountAsAListDoes(t *testing.T) {
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			s, claimIndex := testSource(t, []string{"drascope-scheduler", "second"}, "gpu", "nic")
			handlers := informerevents.Handlers(s.pods.set, s.pods.remove)
			cluster := map[string]*v1.Pod{}
			schedulers := []string{"drascope-scheduler", "second", "default-scheduler"}
			for step := range 200 {
				names := sets.List(sets.KeySet(cluster))
				var pod *v1.Pod
				if len(names) > 0 {
					pod = cluster[names[rng.IntN(len(names))]].DeepCopy()
				}
				finished := pod != nil && (pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed)
				update := func(pod *v1.Pod) {
					handlers.OnUpdate(cluster[pod.Name], pod)
					cluster[pod.Name] = pod
				}
				switch op := rng.IntN(9); {
				case op == 0 || pod == nil:
					name := fmt.Sprintf("pod-%d", step)
					pod = &v1.Pod{
						ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
						Spec:       v1.PodSpec{SchedulerName: schedulers[rng.IntN(len(schedulers))]},
						Status:     v1.PodStatus{Phase: v1.PodPending},
					}
					if rng.IntN(4) > 0 {
						pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To(name)}}
						if err := claimIndex.Add(claimOf(name, []string{"gpu", "nic"}[rng.IntN(2)])); err != nil {
							t.Fatal(err)
						}
					}
					cluster[name] = pod
					handlers.OnAdd(pod, false)
				case finished && op <= 3 || finished && op == 7:
					// Nothing happens to a finished pod but its deletion.
				case op == 1:
					// Bound: still Pending until the kubelet runs it.
					pod.Spec.NodeName = "node"
					update(pod)
				case op == 7:
					if pod.Spec.NodeName != "" {
						pod.Status.Phase = v1.PodRunning
						update(pod)
					}
				case op == 2:
					pod.DeletionTimestamp = &metav1.Time{}
					update(pod)
				case op == 3:
					pod.Status.Phase = []v1.PodPhase{v1.PodSucceeded, v1.PodFailed}[rng.IntN(2)]
					update(pod)
				case op == 4:
					delete(cluster, pod.Name)
					if rng.IntN(2) == 0 {
						handlers.OnDelete(pod)
					} else {
						// A delete the watch missed: the last state it delivered.
						handlers.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/" + pod.Name, Obj: pod})
					}
				case op == 5:
					// A resync: the same object again.
					handlers.OnUpdate(pod, pod)
				case op == 6:
					if obj, ok, _ := claimIndex.GetByKey("ns/" + pod.Name); ok {
						claim := obj.(*resourceapi.ResourceClaim).DeepCopy()
						claim.Status.Allocation = &resourceapi.AllocationResult{}
						if err := claimIndex.Update(claim); err != nil {
							t.Fatal(err)
						}
					}
				case op == 8:
					// Deleted and made again under its name while the watch
					// was down: a relist delivers an update to the new pod.
					again := &v1.Pod{
						ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pod.Name, UID: types.UID(fmt.Sprintf("%s-%d", pod.Name, step))},
						Spec:       v1.PodSpec{SchedulerName: schedulers[rng.IntN(len(schedulers))], ResourceClaims: pod.Spec.ResourceClaims},
						Status:     v1.PodStatus{Phase: v1.PodPending},
					}
					update(again)
				}
				wantPending, wantByScheduler := listCounts(s, cluster)
				if got := s.PendingPodsByDeviceClass(); !maps.Equal(got, wantPending) {
					t.Fatalf("step %d: pending by class %v, a list gives %v", step, got, wantPending)
				}
				if got := s.PodsWithClaimsByScheduler(); !maps.Equal(got, wantByScheduler) {
					t.Fatalf("step %d: pods with claims by scheduler %v, a list gives %v", step, got, wantByScheduler)
				}
			}
		})
	}
}

// listCounts is what the two gauges were when a scrape listed every pod.
func listCounts(s *metricsSource, cluster map[string]*v1.Pod) (pending, byScheduler map[string]int) {
	profiles := s.r.profileNames()
	pending = map[string]int{"gpu": 0, "nic": 0}
	byScheduler = map[string]int{}
	for profile := range profiles {
		byScheduler[profile] = 0
	}
	for _, pod := range cluster {
		if len(pod.Spec.ResourceClaims) == 0 {
			continue
		}
		if pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
			byScheduler[pod.Spec.SchedulerName]++
		}
		if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || !profiles.Has(pod.Spec.SchedulerName) || pod.Status.Phase != v1.PodPending {
			continue
		}
		claim, err := s.claims.ResourceClaims(pod.Namespace).Get(*pod.Spec.ResourceClaims[0].ResourceClaimName)
		if err != nil || claim.Status.Allocation != nil {
			continue
		}
		for _, class := range requestedClasses(claim) {
			pending[class]++
		}
	}
	return pending, byScheduler
}

// A thousand pending claims naming device classes that do not exist make
// one series, not a thousand: the apiserver does not check the name, and
// the label's values are the classes an administrator created, and one
// more.
func TestPendingPodsOfUnknownClassesShareOneSeries(t *testing.T) {
	s, claimIndex := testSource(t, []string{"drascope-scheduler"}, "gpu")
	handlers := informerevents.Handlers(s.pods.set, s.pods.remove)
	for i := range 1000 {
		name := fmt.Sprintf("pod-%d", i)
		if err := claimIndex.Add(claimOf(name, fmt.Sprintf("x-%d", i))); err != nil {
			t.Fatal(err)
		}
		handlers.OnAdd(&v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Spec:       v1.PodSpec{SchedulerName: "drascope-scheduler", ResourceClaims: []v1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To(name)}}},
			Status:     v1.PodStatus{Phase: v1.PodPending},
		}, false)
	}
	want := map[string]int{"gpu": 0, unknownClass: 1000}
	if got := s.PendingPodsByDeviceClass(); !maps.Equal(got, want) {
		t.Errorf("pending by class has %d series; want %v", len(got), want)
	}
}
