package claimholders

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func podWith(name string, priority int32, claims bool) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}, Spec: v1.PodSpec{Priority: ptr.To(priority)}}
	if claims {
		pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
	}
	return pod
}

// The holders follow the pod informer's events: a lower-priority holder
// bound to a node makes it kept; one that moves, stops using claims or is
// deleted (also through a tombstone) no longer does; nodes the snapshot
// does not know are never added.
func TestClaimHoldersFollowPodEvents(t *testing.T) {
	holders := &Holders{}
	events := holders.Handlers()
	urgent := podWith("urgent", 100, true)
	kept := func() []string {
		candidates := sets.New[string]()
		holders.KeepPreemptible(candidates, urgent, sets.New("peer", "other").Has)
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
	holders := &Holders{Synced: func() bool { return synced }}
	events := holders.Handlers()
	urgent := podWith("urgent", 100, true)
	kept := func() bool {
		candidates := sets.New[string]()
		holders.KeepPreemptible(candidates, urgent, sets.New("node").Has)
		return candidates.Has("node")
	}
	if holders.Known() {
		t.Fatal("holders known before the informer's first list")
	}
	synced = true
	training := podWith("training", 0, true)
	holders.Reserve(training, "node")
	if !kept() {
		t.Fatal("a reserved lower-priority holder did not keep its node")
	}
	nominated := training.DeepCopy()
	nominated.Status.NominatedNodeName = "node"
	events.OnUpdate(training, nominated)
	if !kept() {
		t.Fatal("the informer's event for the pod still unbound erased its reservation")
	}
	holders.Unreserve(training.UID)
	if kept() {
		t.Fatal("an unreserved pod still kept its node")
	}
	holders.Reserve(training, "node")
	bound := nominated.DeepCopy()
	bound.Spec.NodeName = "node"
	events.OnUpdate(nominated, bound)
	holders.Unreserve(training.UID)
	if !kept() {
		t.Error("Unreserve forgot a pod the informer had seen bound")
	}
}

// BenchmarkKeepPreemptible: a pod of priority 10 pruned to no candidate on
// 2000 nodes of 50 pods each (production nodes carry 50-100), all holding
// claims at priority 10: no node is added, as in each cycle of a steady
// state.
func BenchmarkKeepPreemptible(b *testing.B) {
	holders := &Holders{}
	nodes := sets.New[string]()
	for n := range 2000 {
		node := fmt.Sprintf("node-%d", n)
		nodes.Insert(node)
		for p := range 50 {
			pod := podWith(fmt.Sprintf("p-%d-%d", n, p), 10, true)
			pod.Spec.NodeName = node
			holders.Set(pod)
		}
	}
	pod := podWith("urgent", 10, true)
	b.ReportAllocs()
	for b.Loop() {
		holders.KeepPreemptible(sets.New[string](), pod, nodes.Has)
	}
}
