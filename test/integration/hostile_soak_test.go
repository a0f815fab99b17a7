package integration

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The hostile soak (docs/reliability.md, "Bounded searches and messages"):
// on nodes of 16 to 64 identical GPUs, each round adds something no node
// can hold (a gang one member too large, a gang of two-GPU members, a pod
// with more claims than its node has GPUs, a claim of a thousand GPUs, a
// prioritized list whose every alternative asks for more than the node
// has) and then an ordinary one-GPU pod on nodes of their own. The
// hostile pods stay in the queue and are retried with backoff through
// the whole soak. Invariants: every ordinary pod is placed, the wait for
// each is logged and the longest is checked against the bound stated in
// docs/reliability.md with a wide margin; no hostile pod is bound and no
// hostile claim allocated (no partial gang); no device is in two claims
// (every scenario's end check); the process's heap after a collection
// grows by less than 256 MiB. A failing run prints its seed;
// -hostile-soak-seed replays it.
var (
	hostileRounds = flag.Int("hostile-soak-rounds", 8, "rounds of the hostile soak (make test: 8; try 100 for a long soak)")
	hostileSeed   = flag.Uint64("hostile-soak-seed", 1, "the hostile soak's seed")
)

// hostileWaitBound bounds an ordinary pod's wait beside the hostile pods:
// one upstream Filter timeout (10 s) that a pod with too many claims may
// take, one more for the cycle it was in when the ordinary pod came, and
// the queue's backoff, with room for a loaded CI machine.
const hostileWaitBound = 45 * time.Second

func TestHostileSoak(t *testing.T) {
	seed := *hostileSeed
	r := rand.New(rand.NewPCG(seed, 0x40571e))
	defer func() {
		if t.Failed() {
			t.Logf("hostile soak failed with seed %d: rerun with -args -hostile-soak-seed=%d", seed, seed)
		}
	}()
	s := newScenario(t, nil)
	heapBefore := heapInUse()

	sizes := []int{16, 32, 64}
	r.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
	big := map[string]int{}
	var bigNodes []string
	for i, size := range sizes {
		name := s.addNode(fmt.Sprintf("big-%d", i), size)
		big[name] = size
		bigNodes = append(bigNodes, name)
	}
	ordinary := []string{s.addNode("ordinary-0", 2), s.addNode("ordinary-1", 2)}
	s.addClaimTemplateForCount("one-gpu", 1)
	s.addClaimTemplateForCount("two-gpus", 2)
	s.addClaimTemplateForCount("thousand-gpus", 1000)

	var hostile []string
	manyClaims := false
	var longest time.Duration
	for round := range *hostileRounds {
		node := bigNodes[r.IntN(len(bigNodes))]
		size := big[node]
		kind := r.IntN(5)
		if kind == 2 && (manyClaims || size > 16) {
			// One pod of too many claims: each of its attempts may take
			// upstream's whole Filter timeout.
			kind = 0
		}
		prefix := fmt.Sprintf("r%d", round)
		switch kind {
		case 0, 1:
			each, members := 1, size+1+r.IntN(3)
			template := "one-gpu"
			if kind == 1 {
				each, members, template = 2, size/2+1+r.IntN(2), "two-gpus"
			}
			group := prefix + "-gang"
			s.addPodGroup(group, int32(members))
			for i := range members {
				name := fmt.Sprintf("%s-gang-%d", prefix, i)
				s.addPodWith(name, schedulerName, fromTemplate(template), onNodes([]string{node}), func(pod *v1.Pod) {
					pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
				})
				hostile = append(hostile, name)
			}
			t.Logf("round %d: a gang of %d × %d GPUs on %s (%d GPUs)", round, members, each, node, size)
		case 2:
			manyClaims = true
			name := prefix + "-many-claims"
			s.addPodWith(name, schedulerName, fromTemplate("one-gpu"), onNodes([]string{node}), withClaims(size+1, "one-gpu"))
			hostile = append(hostile, name)
			t.Logf("round %d: a pod of %d claims on %s (%d GPUs)", round, size+1, node, size)
		case 3:
			name := prefix + "-thousand"
			s.addPodWith(name, schedulerName, fromTemplate("thousand-gpus"), onNodes([]string{node}))
			hostile = append(hostile, name)
			t.Logf("round %d: a claim of 1000 GPUs on %s", round, node)
		case 4:
			name := prefix + "-alternatives"
			s.addManyAlternativesTemplate(name, 8, int64(size+1))
			s.addPodWith(name, schedulerName, fromTemplate(name), onNodes([]string{node}))
			hostile = append(hostile, name)
			t.Logf("round %d: 8 alternatives of %d GPUs on %s (%d GPUs)", round, size+1, node, size)
		}

		name := prefix + "-ordinary"
		start := time.Now()
		s.addPodWith(name, schedulerName, fromTemplate("one-gpu"), onNodes(ordinary))
		s.waitForPodScheduled(name)
		waited := time.Since(start)
		longest = max(longest, waited)
		t.Logf("round %d: the ordinary pod waited %v beside %d hostile pods", round, waited.Round(10*time.Millisecond), len(hostile))
		s.deletePodNow(name)
	}
	t.Logf("%d rounds, %d hostile pods; the longest wait of an ordinary pod: %v", *hostileRounds, len(hostile), longest.Round(10*time.Millisecond))
	var runs []string
	for _, outcome := range []string{"fit", "nofit", "infeasible", "timeout", "error"} {
		runs = append(runs, fmt.Sprintf("%s %v", outcome, max(0, scrapeGauge(t, "drascope_allocation_runs_total", map[string]string{"outcome": outcome}))))
	}
	t.Logf("DRAScope's allocator runs in this process so far: %s", strings.Join(runs, ", "))
	if longest > hostileWaitBound {
		t.Errorf("an ordinary pod waited %v, more than %v", longest, hostileWaitBound)
	}

	pods, err := env.client.CoreV1().Pods(s.namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if slices.Contains(hostile, pod.Name) && pod.Spec.NodeName != "" {
			t.Errorf("hostile pod %s was bound to %s", pod.Name, pod.Spec.NodeName)
		}
	}
	claims, err := env.client.ResourceV1().ResourceClaims(s.namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range claims.Items {
		if claim.Status.Allocation != nil && !strings.Contains(claim.Name, "-ordinary") {
			t.Errorf("claim %s of a hostile pod is allocated", claim.Name)
		}
	}
	if grown := heapInUse() - heapBefore; grown > 256<<20 {
		t.Errorf("the heap grew by %d MiB", grown>>20)
	} else {
		t.Logf("the heap grew by %d MiB", grown>>20)
	}
}

// heapInUse is the process's heap in use after a collection: the
// in-process scheduler's and the test's.
func heapInUse() int64 {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return int64(stats.HeapInuse)
}

// addManyAlternativesTemplate creates a claim template of one request with
// n prioritized alternatives, each of count GPUs.
func (s *scenario) addManyAlternativesTemplate(name string, n int, count int64) {
	s.t.Helper()
	var subs []resourceapi.DeviceSubRequest
	for i := range n {
		subs = append(subs, resourceapi.DeviceSubRequest{Name: fmt.Sprintf("alt-%d", i), DeviceClassName: deviceClassName,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count})
	}
	s.createClaimTemplate(name, resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpu", FirstAvailable: subs,
	}}}})
}
