package drascope

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drascope/drascope/pkg/whatif"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/dryrun"
)

// The dry-run tests: one node with two GPUs, pods of priority 0 holding
// them through claims, and a pod of priority 100 asking for one. They go
// through RemovePod, AddPod and Filter as DefaultPreemption and the
// nominated-pods pass of Filter call them.

const gpuDriver = dracases.GPUDriver

func gpuResult(device string, admin bool) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpuDriver, Pool: "node-0", Device: device, AdminAccess: ptr.To(admin)}
}

// holder is a pod of the given priority using the named standalone claims.
func holder(name string, priority int32, claims ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}, Spec: v1.PodSpec{Priority: ptr.To(priority), NodeName: "node-0"}}
	for _, claim := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: claim, ResourceClaimName: ptr.To(claim)})
	}
	return pod
}

// gpuClaim is a claim asking for one GPU, allocated (devices non-empty)
// and reserved for the users, or not.
func gpuClaim(name string, devices []resourceapi.DeviceRequestAllocationResult, users ...*v1.Pod) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	claim.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
	}}}
	if len(devices) > 0 {
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: devices}}
	}
	for _, user := range users {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: user.Name, UID: user.UID})
	}
	return claim
}

type dryRunCluster struct {
	pl        *DRAScope
	node      fwk.NodeInfo
	preemptor *v1.Pod
	state     fwk.CycleState
	// options build the cycle's what-if (setWhatIf).
	options whatif.Options
}

// setWhatIf writes the cycle's what-if afresh, for the claims (the
// preemptor's own when none), reading pods through pl as it is now.
func (c *dryRunCluster) setWhatIf(claims ...*resourceapi.ResourceClaim) {
	o := c.options
	if len(claims) > 0 {
		o.Claims = claims
	}
	o.View = c.pl.victimView()
	c.state.Write(whatIfKey, whatIfState{whatif.New(o)})
}

// setPods makes the pods lister the scheduler's, and the what-if read it.
func (c *dryRunCluster) setPods(pods corelisters.PodLister) {
	c.pl.pods = pods
	c.setWhatIf()
}

// newDryRunCluster: training-0 holds gpu-0 (claim a), training-1 and
// inference-0 share gpu-1 (claim shared); inference-0 has priority 100,
// the others 0. The preemptor (priority 100) asks for one GPU.
func newDryRunCluster(t *testing.T, extra ...*resourceapi.ResourceClaim) *dryRunCluster {
	t.Helper()
	training0 := holder("training-0", 0, "a")
	training1 := holder("training-1", 0, "shared")
	inference0 := holder("inference-0", 100, "shared")
	preemptor := holder("preemptor", 100, "wanted")
	preemptor.Spec.NodeName = ""
	claims := map[string]*resourceapi.ResourceClaim{
		"a":      gpuClaim("a", []resourceapi.DeviceRequestAllocationResult{gpuResult("gpu-0", false)}, training0),
		"shared": gpuClaim("shared", []resourceapi.DeviceRequestAllocationResult{gpuResult("gpu-1", false)}, training1, inference0),
		"wanted": gpuClaim("wanted", nil),
	}
	for _, claim := range extra {
		claims[claim.Name] = claim
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-0-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: gpuDriver, Pool: resourceapi.ResourcePool{Name: "node-0", Generation: 1, ResourceSliceCount: 1}, NodeName: ptr.To("node-0"),
		Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}},
	}}
	pl := &DRAScope{claims: claimsAt{now: claims}}
	allocating := dryrun.Allocating{Classes: dracases.Classes, CEL: dracases.CEL}
	inUse := sets.New(structured.MakeDeviceID(gpuDriver, "node-0", "gpu-0"), structured.MakeDeviceID(gpuDriver, "node-0", "gpu-1"))
	node := nodeInfo("node-0", training0, training1, inference0)
	c := &dryRunCluster{pl: pl, node: node, preemptor: preemptor, state: framework.NewCycleState(), options: whatif.Options{
		Allocating: allocating,
		State:      structured.AllocatedState{AllocatedDevices: inUse},
		Kept:       sets.New[structured.DeviceID](),
		Slices:     []*resourceapi.ResourceSlice{slice},
		Claims:     []*resourceapi.ResourceClaim{claims["wanted"]},
	}}
	c.setWhatIf()
	return c
}

func (c *dryRunCluster) pod(name string) fwk.PodInfo {
	for _, info := range c.node.GetPods() {
		if info.GetPod().Name == name {
			return info
		}
	}
	pod, _ := framework.NewPodInfo(holder(name, 100, name))
	return pod
}

func (c *dryRunCluster) remove(t *testing.T, state fwk.CycleState, name string) {
	t.Helper()
	if status := c.pl.RemovePod(context.Background(), state, c.preemptor, c.pod(name), c.node); !status.IsSuccess() {
		t.Fatalf("RemovePod(%s): %v", name, status)
	}
}

func (c *dryRunCluster) add(t *testing.T, state fwk.CycleState, name string) {
	t.Helper()
	if status := c.pl.AddPod(context.Background(), state, c.preemptor, c.pod(name), c.node); !status.IsSuccess() {
		t.Fatalf("AddPod(%s): %v", name, status)
	}
}

func TestDryRunFreesTheDevicesOfVictims(t *testing.T) {
	for name, tc := range map[string]struct {
		remove, add []string
		// extra claims, for added pods.
		extra []*resourceapi.ResourceClaim
		// pods are more pods on the node.
		pods     []*v1.Pod
		wantCode fwk.Code
		// wantReason is a part of the refusal.
		wantReason string
	}{
		"a victim holding a GPU frees it": {remove: []string{"training-0"}, wantCode: fwk.Success},
		"a reprieved victim's GPU is in use again": {
			remove: []string{"training-1", "training-0"}, add: []string{"training-0"},
			wantCode: fwk.Unschedulable, wantReason: "even with",
		},
		"a shared claim is not freed while a user of it stays": {
			remove: []string{"training-1"}, wantCode: fwk.Unschedulable, wantReason: "even with the devices of the lower-priority pods on the node freed",
		},
		"a pod nominated to the node takes the freed GPU first": {
			remove: []string{"training-0"}, add: []string{"nominated"},
			extra: []*resourceapi.ResourceClaim{gpuClaim("nominated", nil)},
			// training-1 is left, but its GPU is shared with a pod of
			// priority 100: no victim is left that could help.
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "devices are kept for pods nominated to the node: ns/nominated",
		},
		// The nominated pod needs two GPUs; with training-0 preempted
		// only gpu-0 is free, so it does not fit yet. It keeps every GPU
		// until its victims' devices are all free: the preemptor must not
		// take gpu-0 (issue: a queued pod of equal priority took the
		// first freed GPU, and the preemptor preempted again).
		"a nominated pod short of devices keeps those of its classes": {
			remove: []string{"training-0"}, add: []string{"nominated"},
			extra:    []*resourceapi.ResourceClaim{withCount(gpuClaim("nominated", nil), 2)},
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "devices are kept for pods nominated to the node: ns/nominated",
		},
		"a nominated pod short of devices of another class keeps none of these": {
			remove: []string{"training-0"}, add: []string{"nominated"},
			extra:    []*resourceapi.ResourceClaim{withClass(gpuClaim("nominated", nil), "nic")},
			wantCode: fwk.Success,
		},
		"an admin-access holder frees nothing": {
			remove: []string{"watcher"},
			extra: []*resourceapi.ResourceClaim{gpuClaim("watcher", []resourceapi.DeviceRequestAllocationResult{gpuResult("gpu-0", true)},
				holder("watcher", 0, "watcher"))},
			pods:     []*v1.Pod{holder("watcher", 0, "watcher")},
			wantCode: fwk.Unschedulable, wantReason: "even with",
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newDryRunCluster(t, tc.extra...)
			state := c.state.Clone()
			for _, pod := range tc.pods {
				info, _ := framework.NewPodInfo(pod)
				c.node.AddPodInfo(info)
			}
			for _, pod := range tc.remove {
				c.remove(t, state, pod)
			}
			for _, pod := range tc.add {
				c.add(t, state, pod)
			}
			status := c.pl.Filter(context.Background(), state, c.preemptor, c.node)
			if status.Code() != tc.wantCode {
				t.Fatalf("Filter: %v, want code %v", status, tc.wantCode)
			}
			if tc.wantReason != "" && !strings.Contains(strings.Join(status.Reasons(), ", "), tc.wantReason) {
				t.Errorf("Filter: %v, want a reason containing %q", status.Reasons(), tc.wantReason)
			}
			// The cycle's own state is untouched: preemption evaluates
			// nodes in parallel, each on a clone.
			if w := whatIfIn(c.state); w.Changed() {
				t.Errorf("a clone's RemovePod/AddPod changed the cycle's what-if: removed %v", w.Removed())
			}
		})
	}
}

// A device shortage is Unschedulable (preemption looks at the node) only
// where lower-priority pods hold devices that preempting them frees.
func TestShortageIsUnschedulableOnlyWhereVictimsCouldHelp(t *testing.T) {
	c := newDryRunCluster(t)
	holds := func(c *dryRunCluster, pod *v1.Pod, node fwk.NodeInfo, removed map[types.UID]*v1.Pod) bool {
		return whatif.LowerPriorityHold(c.pl.victimView(), pod, podsOf(node), removed)
	}
	if !holds(c, c.preemptor, c.node, nil) {
		t.Errorf("training-0 holds gpu-0 alone at priority 0: preempting it would help a pod of priority 100")
	}
	if holds(c, c.preemptor, c.node, map[types.UID]*v1.Pod{"training-0": nil}) {
		t.Errorf("with training-0 removed, only training-1 is left, whose claim inference-0 (priority 100) shares")
	}
	// A pod of priority 100 holding a GPU alone: a victim for nobody of
	// priority 100, one for a pod of priority 101.
	same := holder("same", 100, "own")
	withOwn := newDryRunCluster(t, gpuClaim("own", []resourceapi.DeviceRequestAllocationResult{gpuResult("gpu-0", false)}, same))
	if holds(withOwn, holder("peer", 100), nodeInfo("node-0", same), nil) {
		t.Errorf("a pod of equal priority is no victim")
	}
	if !holds(withOwn, holder("higher", 101), nodeInfo("node-0", same), nil) {
		t.Errorf("a pod of priority 100 holding a GPU alone is a victim for a pod of priority 101")
	}
}

// A claim that a pod staying on the node uses is not freed, even where its
// reservation is not written yet (the pod is assumed).
func TestClaimsOfPodsThatStayAreNotFreed(t *testing.T) {
	victim, assumed := holder("victim", 0, "pending-share"), holder("assumed", 100, "pending-share")
	claim := gpuClaim("pending-share", []resourceapi.DeviceRequestAllocationResult{gpuResult("gpu-0", false)}, victim)
	c := newDryRunCluster(t, claim)
	gone := map[types.UID]*v1.Pod{victim.UID: victim}
	if freed := c.pl.victimView().FreedBy(gone, gone, nil); len(freed) != 1 {
		t.Fatalf("with no other pod on the node, the victim's claim must be freed; got %d allocations", len(freed))
	}
	if freed := c.pl.victimView().FreedBy(gone, gone, []*v1.Pod{victim, assumed}); len(freed) != 0 {
		t.Errorf("a claim the assumed pod uses was freed with the victim: %d allocations", len(freed))
	}
}

// A preemptor is retried when a pod that held claims leaves the node it is
// nominated to, and only then.
func TestPreemptorRetriedWhenAVictimGoes(t *testing.T) {
	preemptor := holder("urgent", 100, "wanted")
	preemptor.Spec.NodeName = ""
	preemptor.Status.NominatedNodeName = "node-0"
	notNominated := holder("other", 100, "wanted")
	notNominated.Spec.NodeName = ""
	elsewhere := holder("elsewhere", 0, "a")
	elsewhere.Spec.NodeName = "node-1"
	for name, tc := range map[string]struct {
		pod, gone *v1.Pod
		want      fwk.QueueingHint
	}{
		"a claim holder leaves the nominated node": {pod: preemptor, gone: holder("victim", 0, "a"), want: fwk.Queue},
		"a pod without claims leaves it":           {pod: preemptor, gone: holder("web", 0), want: fwk.QueueSkip},
		"a claim holder leaves another node":       {pod: preemptor, gone: elsewhere, want: fwk.QueueSkip},
		"the pod is nominated nowhere":             {pod: notNominated, gone: holder("victim", 0, "a"), want: fwk.QueueSkip},
		"a preempted claim holder of lower priority goes, before the nomination shows": {pod: notNominated, gone: func() *v1.Pod {
			p := holder("victim", 0, "a")
			p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler}}
			return p
		}(), want: fwk.Queue},
		"a preempted claim holder of equal priority goes": {pod: notNominated, gone: func() *v1.Pod {
			p := holder("victim", 100, "a")
			p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler}}
			return p
		}(), want: fwk.QueueSkip},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := (&DRAScope{}).isSchedulableAfterVictimGone(klog.Background(), tc.pod, tc.gone, nil)
			if err != nil || got != tc.want {
				t.Errorf("hint = %v (err %v), want %v", got, err, tc.want)
			}
		})
	}
}

func withCount(claim *resourceapi.ResourceClaim, count int64) *resourceapi.ResourceClaim {
	claim.Spec.Devices.Requests[0].Exactly.Count = count
	return claim
}

func withClass(claim *resourceapi.ResourceClaim, class string) *resourceapi.ResourceClaim {
	claim.Spec.Devices.Requests[0].Exactly.DeviceClassName = class
	return claim
}

// A preemptor stays with its nominated node while pods of lower priority
// there that the scheduler marked preempted are leaving, if it fits there
// once they are gone; not for a victim stuck past its grace period, nor
// for a stale nomination.
func TestPreemptorStaysOnItsNominatedNodeWhileVictimsLeave(t *testing.T) {
	now := time.Now()
	markedAt := func(at time.Time) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler, LastTransitionTime: metav1.NewTime(at)}}
		}
	}
	leaving := func(priority int32, marks ...func(*v1.Pod)) fwk.NodeInfo {
		victim := holder("training-0", priority, "a")
		for _, mark := range marks {
			mark(victim)
		}
		return nodeInfo("node-0", victim, holder("training-1", 0, "shared"))
	}
	nominated := func(policy v1.PreemptionPolicy) *v1.Pod {
		pod := holder("urgent", 100, "wanted")
		pod.Spec.NodeName, pod.Status.NominatedNodeName, pod.Spec.PreemptionPolicy = "", "node-0", &policy
		return pod
	}
	beingDeleted := func(p *v1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }
	for name, tc := range map[string]struct {
		pod    *v1.Pod
		node   fwk.NodeInfo
		wanted *resourceapi.ResourceClaim
		want   string
	}{
		"a victim marked preempted":                   {pod: nominated(v1.PreemptLowerPriority), node: leaving(0, markedAt(now)), want: "node-0"},
		"a victim marked preempted and being deleted": {pod: nominated(v1.PreemptLowerPriority), node: leaving(0, markedAt(now), beingDeleted), want: "node-0"},
		"a victim stuck past its grace period":        {pod: nominated(v1.PreemptLowerPriority), node: leaving(0, markedAt(now.Add(-2*time.Minute)))},
		"a pod being deleted, not preempted":          {pod: nominated(v1.PreemptLowerPriority), node: leaving(0, beingDeleted)},
		"a preempted pod of the preemptor's priority": {pod: nominated(v1.PreemptLowerPriority), node: leaving(100, markedAt(now))},
		"nothing leaves the node":                     {pod: nominated(v1.PreemptLowerPriority), node: leaving(0)},
		"a pod that may not preempt":                  {pod: nominated(v1.PreemptNever), node: leaving(0, markedAt(now))},
		"a stale nomination: two GPUs, one leaving": {pod: nominated(v1.PreemptLowerPriority), node: leaving(0, markedAt(now)),
			wanted: withCount(gpuClaim("wanted", nil), 2)},
		"nominated to a node not among them": {pod: func() *v1.Pod {
			p := nominated(v1.PreemptLowerPriority)
			p.Status.NominatedNodeName = "node-1"
			return p
		}(), node: leaving(0, markedAt(now))},
	} {
		t.Run(name, func(t *testing.T) {
			c := newDryRunCluster(t)
			if tc.wanted != nil {
				c.setWhatIf(tc.wanted)
			}
			if got := c.pl.nominatedNodeAwaitingVictims(context.Background(), tc.pod, []fwk.NodeInfo{tc.node}, whatIfIn(c.state)); got != tc.want {
				t.Errorf("nominatedNodeAwaitingVictims = %q, want %q", got, tc.want)
			}
		})
	}
}

// Devices whose pods are gone count as free in a preemption dry run, also
// once every victim has been reprieved: otherwise the last victim could
// not be reprieved, and would be preempted for nothing.
func TestDryRunCountsReleasingDevicesFree(t *testing.T) {
	c := newDryRunCluster(t)
	// training-0 runs; training-1 and inference-0, which share gpu-1's
	// claim, are gone: gpu-1 is being released.
	running := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := running.Add(holder("training-0", 0, "a")); err != nil {
		t.Fatal(err)
	}
	c.setPods(corelisters.NewPodLister(running))
	state := c.state.Clone()
	c.remove(t, state, "training-0")
	c.add(t, state, "training-0")
	if status := c.pl.Filter(context.Background(), state, c.preemptor, c.node); !status.IsSuccess() {
		t.Errorf("Filter with training-0 reprieved and gpu-1 being released: %v, want success", status)
	}
}

// The in-use set a cycle starts from (upstream's allocated-devices tracker)
// can lag the claims the tracker lists: for a moment after the last
// victim's claim is deallocated, its device is still counted in use, and
// the claim no longer shows it as releasing. The device is free: a
// nominated preemptor stays on its node, and a preemption dry run needs no
// victim for it.
func TestDeviceOfADeallocatedClaimIsFreeWhileTheInUseSetLags(t *testing.T) {
	deallocated := gpuClaim("a", nil) // gpu-0, still in the cycle's in-use set
	inference0 := holder("inference-0", 100, "shared")
	training1 := holder("training-1", 0, "shared")
	// The pods that run, for the claims' consumers.
	running := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, pod := range []*v1.Pod{holder("training-0", 0, "a"), inference0, training1} {
		if err := running.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	pods := corelisters.NewPodLister(running)

	t.Run("the nominated preemptor stays", func(t *testing.T) {
		c := newDryRunCluster(t, deallocated)
		c.setPods(pods)
		pod := holder("preemptor", 100, "wanted")
		pod.Spec.NodeName, pod.Status.NominatedNodeName = "", "node-0"
		node := nodeInfo("node-0", training1, inference0)
		if got := c.pl.nominatedNodeAwaitingVictims(context.Background(), pod, []fwk.NodeInfo{node}, whatIfIn(c.state)); got != "node-0" {
			t.Errorf("nominatedNodeAwaitingVictims = %q, want node-0: gpu-0's claim is deallocated", got)
		}
	})
	t.Run("a preemption dry run counts it free", func(t *testing.T) {
		c := newDryRunCluster(t, deallocated)
		c.setPods(pods)
		c.node = nodeInfo("node-0", training1, inference0)
		state := c.state.Clone()
		c.remove(t, state, "training-1") // shares gpu-1 with inference-0: frees nothing
		if status := c.pl.Filter(context.Background(), state, c.preemptor, c.node); !status.IsSuccess() {
			t.Errorf("Filter with gpu-0's claim deallocated: %v, want success", status)
		}
	})
	t.Run("a device a claim holds stays in use", func(t *testing.T) {
		c := newDryRunCluster(t)
		c.setPods(pods)
		c.node = nodeInfo("node-0", training1, inference0)
		state := c.state.Clone()
		c.remove(t, state, "training-1")
		if status := c.pl.Filter(context.Background(), state, c.preemptor, c.node); status.IsSuccess() {
			t.Error("Filter with gpu-0 allocated to claim a succeeded, want a shortage")
		}
	})
}

// A victim the scheduler preempted is on its way out: in a preemption dry
// run its claim's device is free, for the pod nominated before, so a
// later preemptor does not choose a victim more for it.
func TestDryRunCountsDevicesOfPreemptedVictimsFree(t *testing.T) {
	training0 := holder("training-0", 0, "a")
	preempted := training0.DeepCopy()
	preempted.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler, LastTransitionTime: metav1.Now()}}
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want bool
	}{
		"running":   {pod: training0},
		"preempted": {pod: preempted, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			running := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			if err := running.Add(tc.pod); err != nil {
				t.Fatal(err)
			}
			c := newDryRunCluster(t)
			c.pl.pods = corelisters.NewPodLister(running)
			release := c.pl.victimView().Releasing()
			got := slices.ContainsFunc(release.Allocations, func(a *resourceapi.AllocationResult) bool {
				return a.Devices.Results[0].Device == "gpu-0"
			})
			if got != tc.want {
				t.Errorf("claim a (gpu-0) of a %s pod releasing: %v, want %v", name, got, tc.want)
			}
		})
	}
}
