package integration

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// Gangs under upstream's workload-aware scheduling (GenericWorkload and
// DRAWorkloadResourceClaims, on for the whole suite: workloadGates). Each
// case runs twice side by side, in namespaces of its own: under the
// in-process drascope-scheduler with the shipped config (pruning, packing,
// BestFit, drascope's preemption) and under a profile of upstream's plugins
// only in bin/drascope-scheduler. Each run must reach the outcome the case
// names, and the two must agree: for gangs, upstream defines the right
// answer.

// gangOutcome is what a gang case left in the cluster once it settled.
type gangOutcome struct {
	// placed counts the gang's pods bound to a node.
	placed int
	// claims counts the gang's claims (per pod and per PodGroup) with an
	// allocation.
	claims int
	// devices counts the devices those allocations hold.
	devices int
	// nodes counts the nodes the bound pods are on.
	nodes int
}

func (o gangOutcome) String() string {
	return fmt.Sprintf("%d pods placed on %d nodes, %d claims allocated holding %d devices", o.placed, o.nodes, o.claims, o.devices)
}

// gangCase builds a cluster and a gang in s, for scheduler, and waits until
// the gang settled.
type gangCase struct {
	name string
	want gangOutcome
	run  func(s *scenario, scheduler string)
}

// gangSize is the number of pods in every case's gang.
const gangSize = 4

var gangCases = []gangCase{{
	// 4 pods × 2 GPUs on 2 nodes × 4 GPUs: every GPU taken, all or nothing.
	name: "fits",
	want: gangOutcome{placed: gangSize, claims: gangSize, devices: 2 * gangSize, nodes: 2},
	run: func(s *scenario, scheduler string) {
		nodes := []string{s.addNode("n0", 4), s.addNode("n1", 4)}
		s.addClaimTemplateForCount("two-gpus", 2)
		s.addPodGroup("gang", gangSize)
		s.addGangPods("gang", scheduler, fromTemplate("two-gpus"), nodes)
		s.waitForGangScheduled()
	},
}, {
	// One GPU of the 8 taken first: 7 free hold three of the members, not
	// four. Nothing may stay allocated, and a pod that needs a whole node
	// afterwards finds one.
	name: "does-not-fit",
	want: gangOutcome{},
	run: func(s *scenario, scheduler string) {
		nodes := []string{s.addNode("n0", 4), s.addNode("n1", 4)}
		s.addClaimTemplateForCount("one-gpu", 1)
		s.addClaimTemplateForCount("four-gpus", 4)
		s.addClaimTemplateForCount("two-gpus", 2)
		s.addPodWith("filler", scheduler, fromTemplate("one-gpu"), onNodes(nodes))
		s.waitForPodScheduled("filler")
		s.addPodGroup("gang", gangSize)
		s.addGangPods("gang", scheduler, fromTemplate("two-gpus"), nodes)
		s.waitForGangUnschedulable()
		s.addPodWith("whole-node", scheduler, fromTemplate("four-gpus"), onNodes(nodes))
		s.waitForPodScheduled("whole-node")
	},
}, {
	// One claim for the whole PodGroup (KEP-5729), made by the claim
	// controller from the group's template: allocated once, reserved for
	// the PodGroup, and every member on the node of its two GPUs.
	name: "group-claim",
	want: gangOutcome{placed: gangSize, claims: 1, devices: 2, nodes: 1},
	run: func(s *scenario, scheduler string) {
		s.addGroupClaimGang(scheduler)
		pods := s.waitForGangScheduled()
		group := s.getPodGroup("gang")
		for _, pod := range pods {
			claim := s.podClaim(pod)
			if len(claim.OwnerReferences) != 1 || claim.OwnerReferences[0].Kind != "PodGroup" {
				s.t.Errorf("pod %s uses claim %s owned by %v, want the PodGroup's claim", pod.Name, claim.Name, claim.OwnerReferences)
			}
			if want := []resourceapi.ResourceClaimConsumerReference{{APIGroup: schedulingapi.GroupName, Resource: "podgroups", Name: group.Name, UID: group.UID}}; !sameConsumers(claim.Status.ReservedFor, want) {
				s.t.Errorf("claim %s is reserved for %+v, want only the PodGroup %+v", claim.Name, claim.Status.ReservedFor, want)
			}
		}
	},
}, {
	// Three of the four members first: the gang waits for its fourth
	// (upstream's PreEnqueue) with nothing allocated, while a pod of no
	// gang is scheduled past it; then the fourth arrives and all four land.
	name: "late-member",
	want: gangOutcome{placed: gangSize, claims: gangSize, devices: 2 * gangSize, nodes: 2},
	run: func(s *scenario, scheduler string) {
		nodes := []string{s.addNode("n0", 4), s.addNode("n1", 4)}
		s.addClaimTemplateForCount("two-gpus", 2)
		s.addPodGroup("gang", gangSize)
		for i := range gangSize - 1 {
			s.addGangPod(i, "gang", scheduler, fromTemplate("two-gpus"), nodes)
		}
		// Created after the members, so the scheduler saw them first.
		s.addCPUPod("no-gang", scheduler, 1, onNodes(nodes))
		s.waitForPodScheduled("no-gang")
		if early := s.gangOutcome(); early != (gangOutcome{}) {
			s.t.Errorf("with %d of %d members the gang already holds %s", gangSize-1, gangSize, early)
		}
		s.addGangPod(gangSize-1, "gang", scheduler, fromTemplate("two-gpus"), nodes)
		s.waitForGangScheduled()
	},
}, {
	// The group claim is allocated on one node; the members are deleted and
	// come back allowed only on the other. The claim stays reserved for the
	// PodGroup, so only upstream's PodGroupPostFilter (DRAScope keeps it)
	// can free it: it deallocates the claim, and the next cycle allocates
	// it where the members may run.
	name: "group-claim-moves",
	want: gangOutcome{placed: gangSize, claims: 1, devices: 2, nodes: 1},
	run: func(s *scenario, scheduler string) {
		nodes := s.addGroupClaimGang(scheduler)
		first := s.waitForGangScheduled()[0].Spec.NodeName
		other := nodes[0]
		if other == first {
			other = nodes[1]
		}
		for i := range gangSize {
			s.deletePodNow(gangPodName(i))
		}
		s.addGangPods("gang", scheduler, fromTemplate("gang-gpus"), []string{other})
		for _, pod := range s.waitForGangScheduled() {
			if pod.Spec.NodeName != other {
				s.t.Errorf("pod %s is on %s, want %s", pod.Name, pod.Spec.NodeName, other)
			}
		}
	},
}}

func TestGangsMatchUpstream(t *testing.T) {
	startUpstreamScheduler(t)
	for _, c := range gangCases {
		t.Run(c.name, func(t *testing.T) {
			outcomes := map[string]*gangOutcome{}
			var both sync.WaitGroup
			for _, scheduler := range []string{upstreamSchedulerName, schedulerName} {
				outcome := &gangOutcome{}
				outcomes[scheduler] = outcome
				both.Add(1)
				go func() {
					defer both.Done()
					t.Run(scheduler, func(t *testing.T) {
						s := newScenario(t, nil)
						c.run(s, scheduler)
						*outcome = s.gangOutcome()
						if *outcome != c.want {
							t.Errorf("%s left %s; want %s", scheduler, outcome, c.want)
						}
					})
				}()
			}
			both.Wait()
			if upstream, drascope := *outcomes[upstreamSchedulerName], *outcomes[schedulerName]; upstream != drascope {
				t.Errorf("upstream left %s, drascope-scheduler %s", upstream, drascope)
			}
		})
	}
}

// addGroupClaimGang creates two nodes of 4 GPUs and a gang whose members
// share one claim of 2 GPUs, made for the PodGroup from its template.
func (s *scenario) addGroupClaimGang(scheduler string) (nodes []string) {
	s.t.Helper()
	nodes = []string{s.addNode("n0", 4), s.addNode("n1", 4)}
	s.addClaimTemplateForCount("gang-gpus", 2)
	s.addPodGroup("gang", gangSize, schedulingapi.PodGroupResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("gang-gpus")})
	s.addGangPods("gang", scheduler, fromTemplate("gang-gpus"), nodes)
	return nodes
}

// addPodGroup creates a PodGroup with a gang policy of minCount pods and
// the given claims for the whole group. Its protection finalizer (added by
// the apiserver's admission; no controller removes it here) is taken off
// when the test ends, so that it can go.
func (s *scenario) addPodGroup(name string, minCount int32, claims ...schedulingapi.PodGroupResourceClaim) {
	s.t.Helper()
	s.addPodGroupSpec(name, schedulingapi.PodGroupSpec{
		SchedulingPolicy: schedulingapi.PodGroupSchedulingPolicy{Gang: &schedulingapi.GangSchedulingPolicy{MinCount: minCount}},
		ResourceClaims:   claims,
	})
}

func (s *scenario) addPodGroupSpec(name string, spec schedulingapi.PodGroupSpec) {
	s.t.Helper()
	if _, err := env.client.SchedulingV1beta1().PodGroups(s.namespace).Create(s.ctx, &schedulingapi.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       spec,
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating PodGroup %s/%s: %v", s.namespace, name, err)
	}
	s.t.Cleanup(func() { s.deletePodGroup(name) })
}

func (s *scenario) deletePodGroup(name string) {
	ctx := context.Background()
	groups := env.client.SchedulingV1beta1().PodGroups(s.namespace)
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := groups.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !isNotFound(err) {
		s.t.Errorf("removing the finalizers of PodGroup %s/%s: %v", s.namespace, name, err)
	}
	if err := groups.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
		s.t.Errorf("deleting PodGroup %s/%s: %v", s.namespace, name, err)
	}
}

func (s *scenario) getPodGroup(name string) *schedulingapi.PodGroup {
	s.t.Helper()
	group, err := env.client.SchedulingV1beta1().PodGroups(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("getting PodGroup %s/%s: %v", s.namespace, name, err)
	}
	return group
}

// gangPodName names the members gang-0 … gang-3.
func gangPodName(i int) string { return fmt.Sprintf("gang-%d", i) }

// addGangPods creates gangSize members of the PodGroup, each with a claim
// entry from source, on the scenario's nodes only (the other scheduler's
// run has nodes of its own at the same time).
func (s *scenario) addGangPods(group, scheduler string, source podClaimSource, nodes []string, changes ...func(*v1.Pod)) {
	s.t.Helper()
	for i := range gangSize {
		s.addGangPod(i, group, scheduler, source, nodes, changes...)
	}
}

// addGangPod creates member i of the PodGroup.
func (s *scenario) addGangPod(i int, group, scheduler string, source podClaimSource, nodes []string, changes ...func(*v1.Pod)) {
	s.t.Helper()
	s.addPodWith(gangPodName(i), scheduler, source, append([]func(*v1.Pod){onNodes(nodes), func(pod *v1.Pod) {
		pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	}}, changes...)...)
}

// deletePodNow deletes a pod with no grace period (there is no kubelet)
// and waits until it is gone.
func (s *scenario) deletePodNow(name string) {
	s.t.Helper()
	pods := env.client.CoreV1().Pods(s.namespace)
	if err := pods.Delete(s.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		s.t.Fatalf("deleting pod %s/%s: %v", s.namespace, name, err)
	}
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return isNotFound(err), nil
	})
	if err != nil {
		s.t.Fatalf("pod %s/%s was not deleted: %v", s.namespace, name, err)
	}
}

// waitForGangScheduled waits until every member is bound, and returns them.
func (s *scenario) waitForGangScheduled() []*v1.Pod {
	s.t.Helper()
	var pods []*v1.Pod
	for i := range gangSize {
		pods = append(pods, s.waitForPodScheduled(gangPodName(i)))
	}
	return pods
}

// waitForGangUnschedulable waits until the scheduler has tried the gang
// and marked every member unschedulable.
func (s *scenario) waitForGangUnschedulable() {
	s.t.Helper()
	for i := range gangSize {
		s.waitForPodUnschedulable(gangPodName(i))
	}
}

// gangOutcome counts what the gang holds: pods whose name is a member's,
// and claims owned by a member or by a PodGroup.
func (s *scenario) gangOutcome() gangOutcome {
	s.t.Helper()
	var outcome gangOutcome
	nodes := map[string]bool{}
	pods, err := env.client.CoreV1().Pods(s.namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if strings.HasPrefix(pod.Name, "gang-") && pod.Spec.NodeName != "" {
			outcome.placed++
			nodes[pod.Spec.NodeName] = true
		}
	}
	outcome.nodes = len(nodes)
	claims, err := env.client.ResourceV1().ResourceClaims(s.namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, claim := range claims.Items {
		if !ownedByGang(claim.OwnerReferences) || claim.Status.Allocation == nil {
			continue
		}
		outcome.claims++
		outcome.devices += len(claim.Status.Allocation.Devices.Results)
	}
	return outcome
}

func ownedByGang(owners []metav1.OwnerReference) bool {
	for _, owner := range owners {
		if owner.Kind == "PodGroup" || (owner.Kind == "Pod" && strings.HasPrefix(owner.Name, "gang-")) {
			return true
		}
	}
	return false
}

func sameConsumers(got, want []resourceapi.ResourceClaimConsumerReference) bool {
	key := func(refs []resourceapi.ResourceClaimConsumerReference) string {
		var keys []string
		for _, r := range refs {
			keys = append(keys, fmt.Sprintf("%s/%s/%s/%s", r.APIGroup, r.Resource, r.Name, r.UID))
		}
		sort.Strings(keys)
		return strings.Join(keys, ",")
	}
	return key(got) == key(want)
}

// kubernetes/kubernetes#140097's reproducer of #138765, at the size of a
// gang of four: a node with two GPUs, each offered whole or as two halves
// on a shared counter, and four members whose claims each prefer a whole
// GPU and take a half when they must. One by one, the first two members
// take both GPUs whole and the third finds nothing; upstream then stops
// (the fourth cannot make minCount) and leaves the gang pending. DRAScope
// chooses for all four at once, the fourth included although the failed
// cycle never reached it, and places them on the four halves.
func TestGangBacktrackingPlacesWhatUpstreamCannot(t *testing.T) {
	planned := func() float64 {
		return max(0, scrapeGauge(t, "drascope_gang_plans_total", map[string]string{"result": "Placed"}))
	}
	before := planned()
	startUpstreamScheduler(t)
	want := map[string]gangOutcome{
		upstreamSchedulerName: {},
		schedulerName:         {placed: gangSize, claims: gangSize, devices: gangSize, nodes: 1},
	}
	var both sync.WaitGroup
	for _, scheduler := range []string{upstreamSchedulerName, schedulerName} {
		both.Add(1)
		go func() {
			defer both.Done()
			t.Run(scheduler, func(t *testing.T) {
				s := newScenario(t, nil)
				node := s.addNode("n0", 0)
				s.addPartitionablePool("gpu-0", &node)
				s.addPartitionablePool("gpu-1", &node)
				s.addWholeOrHalfTemplate("whole-or-half")
				s.addPodGroup("gang", gangSize)
				s.addGangPods("gang", scheduler, fromTemplate("whole-or-half"), []string{node})
				if scheduler == upstreamSchedulerName {
					s.waitForGangUnschedulable()
				} else {
					halves := sets.New[string]()
					for _, pod := range s.waitForGangScheduled() {
						result := s.allocatedDevice(s.podClaim(pod))
						halves.Insert(result.Pool + "/" + result.Device)
					}
					if halves.Len() != gangSize || halves.Has(s.namespace+"-gpu-0/whole") || halves.Has(s.namespace+"-gpu-1/whole") {
						t.Errorf("the members got %v, want the four halves", sets.List(halves))
					}
				}
				if got := s.gangOutcome(); got != want[scheduler] {
					t.Errorf("%s left %s; want %s", scheduler, got, want[scheduler])
				}
			})
		}()
	}
	both.Wait()
	if after := planned(); after <= before {
		t.Errorf("drascope_gang_plans_total{result=\"Placed\"} stayed at %v: no plan was counted", after)
	}
}

// addWholeOrHalfTemplate creates a claim template whose one request
// prefers the whole partitionable GPU and falls back to a half.
func (s *scenario) addWholeOrHalfTemplate(name string) {
	s.t.Helper()
	sub := func(name, expression string) resourceapi.DeviceSubRequest {
		return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: deviceClassName,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}}}
	}
	partition := fmt.Sprintf("device.attributes[%q].?partition.orValue(\"\")", driverName)
	s.createClaimTemplate(name, resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		sub("whole", partition+` == "whole"`), sub("half", partition+`.startsWith("half")`),
	}}}}})
}

// Packing (scoring.strategy MostAllocated in the shipped config) places a
// gang's members on as few nodes as possible: the first member's devices,
// in flight in the same pod-group cycle, make its node the fullest for the
// second. Upstream's default scoring spreads them or not, by chance.
func TestGangPacksOntoFewestNodes(t *testing.T) {
	s := newScenario(t, nil)
	nodes := []string{s.addNode("n0", 4), s.addNode("n1", 4), s.addNode("n2", 4)}
	s.addClaimTemplateForCount("two-gpus", 2)
	s.addPodGroup("gang", 2)
	for i := range 2 {
		s.addGangPod(i, "gang", schedulerName, fromTemplate("two-gpus"), nodes)
	}
	for i := range 2 {
		s.waitForPodScheduled(gangPodName(i))
	}
	if got := s.gangOutcome(); got.nodes != 1 {
		t.Errorf("a gang of 2 × 2 GPUs on nodes of 4 landed on %d nodes (%s); want 1", got.nodes, got)
	}
}

// gangPreemptionCase is a cluster of lower-priority pods and a gang of
// higher priority, with what each scheduler must make of it.
type gangPreemptionCase struct {
	name string
	// nodes × nodeGPUs (4 when 0); lowGang adds a PodGroup of 2 pods × 2
	// GPUs that may only be disrupted whole (disruptionMode All), before
	// the singles.
	nodes, nodeGPUs int
	lowGang         bool
	// singles of 1 GPU fill what the low gang left.
	singles int
	// memberGPUs is what each of the gang's gangSize members asks for.
	memberGPUs int64
	// placed is how many members each scheduler must bind, and
	// evictedGPUs how many GPUs the victims held.
	placed, evictedGPUs map[string]int
}

var gangPreemptionCases = []gangPreemptionCase{{
	// 8 GPUs, all held: the low gang's 4 and four singles'. The gang of
	// 4 × 1 GPU needs one node's worth: DRAScope evicts the low gang whole
	// or the singles of one node, not both, and places every member.
	// Upstream counts the victims' devices in use during its dry run, so
	// it finds no placement and evicts nobody.
	name: "frees-devices-for-every-member", nodes: 2, lowGang: true, singles: 4, memberGPUs: 1,
	placed:      map[string]int{schedulerName: gangSize, upstreamSchedulerName: 0},
	evictedGPUs: map[string]int{schedulerName: 4, upstreamSchedulerName: 0},
}, {
	// One node of 8 GPUs, 6 held by singles: the gang of 4 × 1 GPU takes
	// the 2 free GPUs first and evicts 2 singles, not 4.
	name: "takes-free-devices-first", nodes: 1, nodeGPUs: 8, singles: 6, memberGPUs: 1,
	placed:      map[string]int{schedulerName: gangSize, upstreamSchedulerName: 0},
	evictedGPUs: map[string]int{schedulerName: 2, upstreamSchedulerName: 0},
}, {
	// 3 nodes × 4 GPUs, all held by singles. Members of 3 GPUs fit one per
	// node, so three of four could place after evicting 9 pods: an eviction
	// that leaves the gang pending. Nobody may be evicted.
	name: "evicts-nobody-when-the-gang-cannot-place", nodes: 3, singles: 12, memberGPUs: 3,
	placed:      map[string]int{schedulerName: 0, upstreamSchedulerName: 0},
	evictedGPUs: map[string]int{schedulerName: 0, upstreamSchedulerName: 0},
}}

// A gang of higher priority on a cluster full of lower-priority pods: it
// places whole, having evicted only what it needs, or evicts nobody; a
// victim gang goes whole or not at all. Each case runs under DRAScope
// (with DRAScopePreemption) and under upstream's plugins side by side; no
// device may be held twice at any end.
func TestGangPreemption(t *testing.T) {
	startUpstreamScheduler(t)
	for _, tc := range gangPreemptionCases {
		t.Run(tc.name, func(t *testing.T) {
			var both sync.WaitGroup
			for _, scheduler := range []string{upstreamSchedulerName, schedulerName} {
				both.Add(1)
				go func() {
					defer both.Done()
					t.Run(scheduler, func(t *testing.T) { runGangPreemption(t, tc, scheduler) })
				}()
			}
			both.Wait()
		})
	}
}

func runGangPreemption(t *testing.T, tc gangPreemptionCase, scheduler string) {
	s := newScenario(t, nil)
	preempted := s.playKubelet()
	class := s.priorityClasses()
	low, high := class(10, false), class(100, false)
	var nodes []string
	for i := range tc.nodes {
		nodes = append(nodes, s.addNode(fmt.Sprintf("n%d", i), cmp.Or(tc.nodeGPUs, 4)))
	}
	s.addClaimTemplateForCount("one-gpu", 1)
	gpusOf := map[string]int{}
	if tc.lowGang {
		s.addClaimTemplateForCount("two-gpus", 2)
		s.addPodGroupSpec("low-gang", schedulingapi.PodGroupSpec{
			SchedulingPolicy:  schedulingapi.PodGroupSchedulingPolicy{Gang: &schedulingapi.GangSchedulingPolicy{MinCount: 2}},
			DisruptionMode:    &schedulingapi.DisruptionMode{All: &schedulingapi.AllDisruptionMode{}},
			PriorityClassName: low,
		})
		for i := range 2 {
			name := fmt.Sprintf("low-gang-%d", i)
			s.addPodWith(name, scheduler, fromTemplate("two-gpus"), onNodes(nodes), withPriorityClass(low), func(pod *v1.Pod) {
				pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("low-gang")}
			})
			gpusOf[name] = 2
		}
		s.waitForPodScheduled("low-gang-0")
		s.waitForPodScheduled("low-gang-1")
	}
	for i := range tc.singles {
		name := fmt.Sprintf("low-%d", i)
		s.addPodWith(name, scheduler, fromTemplate("one-gpu"), onNodes(nodes), withPriorityClass(low))
		s.waitForPodScheduled(name)
		gpusOf[name] = 1
	}
	s.addClaimTemplateForCount("member-gpus", tc.memberGPUs)
	s.addPodGroupSpec("gang", schedulingapi.PodGroupSpec{
		SchedulingPolicy:  schedulingapi.PodGroupSchedulingPolicy{Gang: &schedulingapi.GangSchedulingPolicy{MinCount: gangSize}},
		PriorityClassName: high,
	})
	s.addGangPods("gang", scheduler, fromTemplate("member-gpus"), nodes, withPriorityClass(high))
	s.waitForGangSettled()
	outcome, victims := s.gangOutcome(), preempted.list()
	t.Logf("%s: %s, evicted %v; gang-%d %s", scheduler, outcome, victims, gangSize-1, describeScheduling(s.getPod(gangPodName(gangSize-1))))
	evictedGPUs := 0
	for _, name := range victims {
		evictedGPUs += gpusOf[name]
	}
	if outcome.placed != tc.placed[scheduler] || evictedGPUs != tc.evictedGPUs[scheduler] {
		t.Errorf("%s placed %d members having evicted pods holding %d GPUs (%v); want %d placed, %d GPUs evicted",
			scheduler, outcome.placed, evictedGPUs, victims, tc.placed[scheduler], tc.evictedGPUs[scheduler])
	}
	if outcome.placed != gangSize && len(victims) > 0 {
		t.Errorf("%s evicted %v and left the gang with %s", scheduler, victims, outcome)
	}
	if gone := sets.New(victims...); gone.Has("low-gang-0") != gone.Has("low-gang-1") {
		t.Errorf("%s evicted %v: one member of a gang that may only be disrupted whole", scheduler, victims)
	}
	s.checkNoDeviceAllocatedTwice()
}

// waitForGangSettled waits until every member is bound, or every member
// was refused and a retry had time to follow (the backoff of a first
// refusal is one second): whatever the first attempt's
// PodGroupPostFilter did, preemption included, has had its effect then.
func (s *scenario) waitForGangSettled() {
	s.t.Helper()
	refused := func() bool {
		for i := range gangSize {
			pod := s.getPod(gangPodName(i))
			if c := scheduledCondition(pod); pod.Spec.NodeName != "" || c == nil || c.Reason != v1.PodReasonUnschedulable {
				return false
			}
		}
		return true
	}
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if s.gangOutcome().placed == gangSize {
			return true, nil
		}
		return refused(), nil
	})
	if err != nil {
		s.t.Fatalf("the gang neither placed nor was refused: %v", err)
	}
	if s.gangOutcome().placed == gangSize {
		return
	}
	time.Sleep(5 * time.Second)
}
