package drascope

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/claimholders"
)

func podWith(name string, priority int32, claims bool) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}, Spec: v1.PodSpec{Priority: ptr.To(priority)}}
	if claims {
		pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
	}
	return pod
}

func nodeInfo(name string, pods ...*v1.Pod) fwk.NodeInfo {
	info := framework.NewNodeInfo(pods...)
	info.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return info
}

// Pruning keeps, for a pod that may preempt, the nodes where pods of lower
// priority hold claims: DRA-aware preemption must reach them.
func TestPruningKeepsNodesWithLowerPriorityClaims(t *testing.T) {
	holders := holdersOf(map[string][]*v1.Pod{
		"batch":     {podWith("training", 0, true)},
		"peers":     {podWith("inference", 100, true)},
		"no-claims": {podWith("web", 0, false)},
		"gone":      {podWith("orphan", 0, true)},
	})
	inSnapshot := sets.New("free", "batch", "peers", "no-claims").Has
	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want []string
	}{
		"a high-priority pod keeps the node of a lower-priority claim holder": {pod: podWith("urgent", 100, true), want: []string{"free", "batch"}},
		"a pod of the same priority as every holder keeps nothing more":       {pod: podWith("batch-2", 0, true), want: []string{"free"}},
		"preemptionPolicy Never keeps nothing more": {pod: func() *v1.Pod {
			p := podWith("polite", 100, true)
			p.Spec.PreemptionPolicy = ptr.To(v1.PreemptNever)
			return p
		}(), want: []string{"free"}},
	} {
		t.Run(name, func(t *testing.T) {
			candidates := sets.New("free")
			if mayPreempt(tc.pod) {
				holders.KeepPreemptible(candidates, tc.pod, inSnapshot)
			}
			if !candidates.Equal(sets.New(tc.want...)) {
				t.Errorf("candidates %v, want %v", sets.List(candidates), tc.want)
			}
		})
	}
}

func TestPodsWithExtendedResourcesAreNotPruned(t *testing.T) {
	pod := podWith("p", 0, true)
	pod.Spec.Containers = []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}}
	if requestsExtendedResources(pod) {
		t.Errorf("a pod asking for CPU only counts as asking for extended resources")
	}
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{"example.com/gpu": resource.MustParse("1")}}}}
	if !requestsExtendedResources(pod) {
		t.Errorf("an init container's extended resource was missed")
	}
	// DRA's implicit names for a device class are in the kubernetes.io
	// domain, which IsExtendedResourceName does not count; upstream's
	// PreFilter serves them with a claim of its own.
	implicit := podWith("implicit", 0, true)
	implicit.Spec.Containers = []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{"deviceclass.resource.kubernetes.io/gpu": resource.MustParse("1")}}}}
	if !requestsExtendedResources(implicit) {
		t.Errorf("a device class's implicit extended resource name was missed")
	}
	podLevel := podWith("pod-level", 0, true)
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{"example.com/gpu": resource.MustParse("1")}}
	if !requestsExtendedResources(podLevel) {
		t.Errorf("a pod-level extended resource was missed")
	}
}

// claimsAt is a claim tracker holding the claims as they are now, and the
// allocations in flight.
type claimsAt struct {
	fwk.ResourceClaimTracker
	now     map[string]*resourceapi.ResourceClaim
	pending map[types.UID]*resourceapi.AllocationResult
}

func (c claimsAt) Get(_, name string) (*resourceapi.ResourceClaim, error) {
	if claim, ok := c.now[name]; ok {
		return claim, nil
	}
	return nil, fmt.Errorf("claim %s not found", name)
}

func (c claimsAt) List() ([]*resourceapi.ResourceClaim, error) {
	return slices.Collect(maps.Values(c.now)), nil
}

func (c claimsAt) GetPendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	return c.pending[uid]
}

// Pruning only for the claims upstream's PreFilter worked with: not when a
// claim changed meanwhile (another pod's binding allocated it) or is being
// allocated for another pod of the group (upstream's Filter then checks
// that allocation's node, and the claim needs no free device).
func TestPruningOnlyForClaimsUpstreamAllocates(t *testing.T) {
	read := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared", UID: "uid-shared", ResourceVersion: "1"}}
	allocated := read.DeepCopy()
	allocated.ResourceVersion = "2"
	allocated.Status.Allocation = &resourceapi.AllocationResult{}
	for name, tc := range map[string]struct {
		tracker claimsAt
		want    bool
	}{
		"unchanged":            {tracker: claimsAt{now: map[string]*resourceapi.ResourceClaim{"shared": read}}, want: true},
		"allocated meanwhile":  {tracker: claimsAt{now: map[string]*resourceapi.ResourceClaim{"shared": allocated}}},
		"changed meanwhile":    {tracker: claimsAt{now: map[string]*resourceapi.ResourceClaim{"shared": func() *resourceapi.ResourceClaim { c := read.DeepCopy(); c.ResourceVersion = "3"; return c }()}}},
		"gone":                 {tracker: claimsAt{}},
		"allocation in flight": {tracker: claimsAt{now: map[string]*resourceapi.ResourceClaim{"shared": read}, pending: map[types.UID]*resourceapi.AllocationResult{"uid-shared": {}}}},
	} {
		t.Run(name, func(t *testing.T) {
			pl := &DRAScope{claims: tc.tracker}
			if got := pl.claimsUnchanged(&podClaims{toAllocate: []*resourceapi.ResourceClaim{read}}); got != tc.want {
				t.Errorf("claimsUnchanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// holdersOf records pods bound to nodes, by node.
func holdersOf(byNode map[string][]*v1.Pod) *claimholders.Holders {
	holders := &claimholders.Holders{}
	for node, pods := range byNode {
		for _, pod := range pods {
			pod.Spec.NodeName = node
			holders.Set(pod)
		}
	}
	return holders
}

// The note that the claims failed together is said only where every node
// the pod may run on was refused for its claims: by Filter, by pruning, or
// left out by this plugin's PreFilter alone.
func TestRefusedForClaimsOnly(t *testing.T) {
	nodes := []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}
	for name, tc := range map[string]struct {
		a, absent *fwk.Status
		want      bool
	}{
		"Filter on a, left out by this plugin on b": {
			a:      fwk.NewStatus(fwk.UnschedulableAndUnresolvable, cannotAllocate),
			absent: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't satisfy plugin(s) ["+Name+"]"),
			want:   true,
		},
		"pruning refused every node": {
			absent: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, noFreeDevice),
			want:   true,
		},
		"a refused for CPU": {
			a:      fwk.NewStatus(fwk.Unschedulable, "Insufficient cpu"),
			absent: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, cannotAllocate),
		},
		"b left out by another plugin too": {
			a:      fwk.NewStatus(fwk.UnschedulableAndUnresolvable, cannotAllocate),
			absent: fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't satisfy plugin(s) ["+Name+" NodeAffinity]"),
		},
	} {
		t.Run(name, func(t *testing.T) {
			statuses := framework.NewDefaultNodeToStatus()
			if tc.absent != nil {
				statuses.SetAbsentNodesStatus(tc.absent)
			}
			if tc.a != nil {
				statuses.Set("a", tc.a)
			}
			if got := refusedForClaimsOnly(statuses, nodes); got != tc.want {
				t.Errorf("refusedForClaimsOnly = %v, want %v", got, tc.want)
			}
		})
	}
}
