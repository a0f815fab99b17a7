package informerevents

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestObjectUnwrapsTombstones(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	for name, obj := range map[string]any{
		"object":    pod,
		"tombstone": cache.DeletedFinalStateUnknown{Key: "default/p", Obj: pod},
	} {
		if got, ok := Object[*v1.Pod](obj); !ok || got != pod {
			t.Errorf("%s: got %v, %v; want the pod", name, got, ok)
		}
	}
	if _, ok := Object[*v1.Pod](cache.DeletedFinalStateUnknown{Obj: &v1.Node{}}); ok {
		t.Error("a tombstone of a node read as a pod")
	}
}

func TestHandlers(t *testing.T) {
	var set, deleted []string
	h := Handlers(func(p *v1.Pod) { set = append(set, p.Name) }, func(p *v1.Pod) { deleted = append(deleted, p.Name) })
	pod := func(name string) *v1.Pod { return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	h.OnAdd(pod("a"), false)
	h.OnUpdate(pod("a"), pod("b"))
	h.OnAdd(&v1.Node{}, false)
	h.OnDelete(pod("c"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Obj: pod("d")})
	if got := append(set, deleted...); len(got) != 4 || got[0] != "a" || got[1] != "b" || got[2] != "c" || got[3] != "d" {
		t.Errorf("set %v, deleted %v; want a, b set and c, d deleted", set, deleted)
	}
}
