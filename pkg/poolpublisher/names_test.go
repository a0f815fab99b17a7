package poolpublisher

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
)

// Two pools whose plain names collide: the first to hold the name keeps it,
// whether the informer shows its object or only the publisher's own write
// does yet; the second gets its hashed name.
func TestNameForTakenPlainName(t *testing.T) {
	p := &Publisher{}
	objects := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	tm := &term{objects: objects, written: map[drausage.PoolID]*v1alpha1.ResourcePool{}}
	first := drausage.PoolID{Driver: "a.b", Pool: "c"}
	second := drausage.PoolID{Driver: "a", Pool: "b.c"}
	hashed := v1alpha1.HashedName("a", "b.c")
	if got := p.nameFor(tm, first); got != "a.b.c" {
		t.Fatalf("first pool got %q, want its plain name", got)
	}
	obj := &v1alpha1.ResourcePool{
		ObjectMeta: metav1.ObjectMeta{Name: "a.b.c"},
		Spec:       v1alpha1.ResourcePoolSpec{Driver: first.Driver, PoolName: first.Pool},
	}

	if err := objects.Add(obj); err != nil {
		t.Fatal(err)
	}
	if got := p.nameFor(tm, first); got != "a.b.c" {
		t.Errorf("a pool lost its own plain name: %q", got)
	}
	if got := p.nameFor(tm, second); got != hashed {
		t.Errorf("second pool, plain name held by an object the informer shows: got %q, want the hashed %q", got, hashed)
	}

	if err := objects.Delete(obj); err != nil {
		t.Fatal(err)
	}
	tm.written[first] = obj
	if got := p.nameFor(tm, second); got != hashed {
		t.Errorf("second pool, plain name held by a write the informer has not shown yet: got %q, want the hashed %q", got, hashed)
	}
}
