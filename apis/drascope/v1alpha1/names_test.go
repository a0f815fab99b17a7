package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPlainName(t *testing.T) {
	tests := []struct {
		driver, pool, want string
		valid              bool
	}{
		{"gpu.example.com", "node-1", "gpu.example.com.node-1", true},
		{"gpu.example.com", "rack-1/node-1", "gpu.example.com.rack-1-node-1", true},
		{"gpu.example.com", "Node_1", "gpu.example.com.Node_1", false},
		{"gpu.example.com", strings.Repeat("a", 250), "gpu.example.com." + strings.Repeat("a", 250), false},
	}
	for _, tc := range tests {
		got, valid := PlainName(tc.driver, tc.pool)
		if got != tc.want || valid != tc.valid {
			t.Errorf("PlainName(%q, %q) = %q, %v; want %q, %v", tc.driver, tc.pool, got, valid, tc.want, tc.valid)
		}
	}
}

func TestHashedName(t *testing.T) {
	pairs := [][2]string{
		// Plain names that collide: the hashed names must not.
		{"a.b", "c"}, {"a", "b.c"},
		{"gpu.example.com", "x/y"}, {"gpu.example.com", "x-y"},
		// Invalid or too long as plain names.
		{"gpu.example.com", "Node_1"},
		{"gpu.example.com", strings.Repeat("a", 250)},
		{"gpu.example.com", strings.Repeat("a", 250) + "b"},
		{"gpu.example.com", "-/-/-"},
		{"X", "/"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := HashedName(p[0], p[1])
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("HashedName(%q, %q) = %q is not a valid name: %v", p[0], p[1], name, errs)
		}
		if again := HashedName(p[0], p[1]); again != name {
			t.Errorf("HashedName(%q, %q) is not stable: %q, then %q", p[0], p[1], name, again)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("pools %q and %q share the name %q", other, p, name)
		}
		seen[name] = p
	}
}

// The example in docs/resourcepools.md.
func TestHashedNameDocumentedExample(t *testing.T) {
	if got, want := HashedName("gpu.example.com", "Node_1"), "gpu-example-com-node-1-0f36065bb272cea0"; got != want {
		t.Errorf("HashedName = %q, docs/resourcepools.md says %q", got, want)
	}
}
