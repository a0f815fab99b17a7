package poolpublisher

import (
	"testing"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
)

func TestNameForTakenPlainName(t *testing.T) {
	p := &Publisher{}
	p.resetLocked(nil)
	first := drausage.PoolID{Driver: "a.b", Pool: "c"}
	second := drausage.PoolID{Driver: "a", Pool: "b.c"}
	if got := p.nameFor(first); got != "a.b.c" {
		t.Fatalf("first pool got %q, want its plain name", got)
	}
	p.names["a.b.c"] = first
	if got := p.nameFor(first); got != "a.b.c" {
		t.Errorf("a pool lost its own plain name: %q", got)
	}
	if got, want := p.nameFor(second), v1alpha1.HashedName("a", "b.c"); got != want {
		t.Errorf("second pool with the same plain name got %q, want the hashed %q", got, want)
	}
}
