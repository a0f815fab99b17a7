package victims

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// holder is a pod of the given priority using the named standalone claims.
func holder(name string, priority int32, claims ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}, Spec: v1.PodSpec{Priority: ptr.To(priority), NodeName: "node-0"}}
	for _, claim := range claims {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: claim, ResourceClaimName: ptr.To(claim)})
	}
	return pod
}

// gpuClaim is a claim asking for one GPU, reserved for the users.
func gpuClaim(name string, users ...*v1.Pod) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	for _, user := range users {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: user.Name, UID: user.UID})
	}
	return claim
}

func TestOnlyUsedBy(t *testing.T) {
	a, b := holder("a", 0), holder("b", 0)
	gone := map[types.UID]*v1.Pod{a.UID: a}
	owned := gpuClaim("owned")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "a", UID: a.UID, Controller: ptr.To(true)}}
	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		"reserved for the victim only":               {claim: gpuClaim("c", a), want: true},
		"reserved for a victim and another pod":      {claim: gpuClaim("c", a, b)},
		"not reserved yet, generated for the victim": {claim: owned, want: true},
		"not reserved yet, standalone":               {claim: gpuClaim("c")},
	} {
		t.Run(name, func(t *testing.T) {
			if got := OnlyUsedBy(tc.claim, gone); got != tc.want {
				t.Errorf("OnlyUsedBy = %v, want %v", got, tc.want)
			}
		})
	}
}

// A refusal lands in the pending pod's status and events: it names the
// nominated pods of the pod's own namespace, and only counts the others.
func TestSeenFromANamespace(t *testing.T) {
	pod := func(namespace, name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	}
	for _, tc := range []struct {
		pods []*v1.Pod
		want string
	}{
		{[]*v1.Pod{pod("team-a", "urgent")}, "team-a/urgent"},
		{[]*v1.Pod{pod("team-b", "urgent")}, "a pod of another namespace"},
		{[]*v1.Pod{pod("team-a", "one"), pod("team-b", "two"), pod("team-c", "three")}, "team-a/one, 2 pods of other namespaces"},
	} {
		if got := SeenFrom("team-a", tc.pods); got != tc.want {
			t.Errorf("SeenFrom(team-a, %d pods) = %q, want %q", len(tc.pods), got, tc.want)
		}
	}
}
