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
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
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
				holders.keepPreemptible(candidates, tc.pod, inSnapshot)
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
func holdersOf(byNode map[string][]*v1.Pod) *claimHolders {
	holders := &claimHolders{}
	for node, pods := range byNode {
		for _, pod := range pods {
			pod.Spec.NodeName = node
			holders.set(pod)
		}
	}
	return holders
}

// The holders follow the pod informer's events: a lower-priority holder
// bound to a node makes it kept; one that moves, stops using claims or is
// deleted (also through a tombstone) no longer does; nodes the snapshot
// does not know are never added.
func TestClaimHoldersFollowPodEvents(t *testing.T) {
	holders := &claimHolders{}
	events := holders.handlers()
	urgent := podWith("urgent", 100, true)
	kept := func() []string {
		candidates := sets.New[string]()
		holders.keepPreemptible(candidates, urgent, sets.New("peer", "other").Has)
		return sets.List(candidates)
	}
	peer := podWith("inference", 100, true)
	peer.Spec.NodeName = "peer"
	events.OnAdd(peer, false)
	pending := podWith("training", 0, true)
	events.OnAdd(pending, false)
	if got := kept(); len(got) != 0 {
		t.Fatalf("kept %v for peers and a pending pod, want nothing", got)
	}
	bound := pending.DeepCopy()
	bound.Spec.NodeName = "peer"
	events.OnUpdate(pending, bound)
	if got := kept(); !slices.Equal(got, []string{"peer"}) {
		t.Fatalf("kept %v once a lower-priority holder was bound to peer, want [peer]", got)
	}
	elsewhere := podWith("elsewhere", 0, true)
	elsewhere.Spec.NodeName = "not-in-snapshot"
	events.OnAdd(elsewhere, false)
	if got := kept(); !slices.Equal(got, []string{"peer"}) {
		t.Fatalf("kept %v with a holder on a node the snapshot lacks, want [peer]", got)
	}
	noClaims := bound.DeepCopy()
	noClaims.Spec.ResourceClaims = nil
	events.OnUpdate(bound, noClaims)
	if got := kept(); len(got) != 0 {
		t.Fatalf("kept %v after the holder's update dropped its claims, want nothing", got)
	}
	events.OnUpdate(noClaims, bound)
	events.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/training", Obj: bound})
	if got := kept(); len(got) != 0 {
		t.Errorf("kept %v after the holder's deletion, want nothing", got)
	}
	if len(holders.pods) != 2 || len(holders.byPriority) != 2 {
		t.Errorf("holders hold %d pods at %d priorities, want the two left (inference, elsewhere)", len(holders.pods), len(holders.byPriority))
	}
}

// A pod Reserve placed counts at once and stays counted through the
// informer's events for it still unbound (upstream patches its
// nominatedNodeName before PreBind), until Unreserve; Unreserve leaves a
// pod the informer has seen bound (its binding went through although the
// call failed). Until the handler synced, the holders are not known.
func TestReservedHolderOutlivesUnboundEvents(t *testing.T) {
	synced := false
	holders := &claimHolders{synced: func() bool { return synced }}
	events := holders.handlers()
	urgent := podWith("urgent", 100, true)
	kept := func() bool {
		candidates := sets.New[string]()
		holders.keepPreemptible(candidates, urgent, sets.New("node").Has)
		return candidates.Has("node")
	}
	if holders.known() {
		t.Fatal("holders known before the informer's first list")
	}
	synced = true
	training := podWith("training", 0, true)
	holders.reserve(training, "node")
	if !kept() {
		t.Fatal("a reserved lower-priority holder did not keep its node")
	}
	nominated := training.DeepCopy()
	nominated.Status.NominatedNodeName = "node"
	events.OnUpdate(training, nominated)
	if !kept() {
		t.Fatal("the informer's event for the pod still unbound erased its reservation")
	}
	holders.unreserve(training.UID)
	if kept() {
		t.Fatal("an unreserved pod still kept its node")
	}
	holders.reserve(training, "node")
	bound := nominated.DeepCopy()
	bound.Spec.NodeName = "node"
	events.OnUpdate(nominated, bound)
	holders.unreserve(training.UID)
	if !kept() {
		t.Error("Unreserve forgot a pod the informer had seen bound")
	}
}
