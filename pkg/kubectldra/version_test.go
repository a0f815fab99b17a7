package kubectldra

import "testing"

func TestDrascopeVersionComesFromTheBuildMetadata(t *testing.T) {
	for _, c := range []struct{ gitVersion, drascope, kubernetes string }{
		{"v1.37.2+drascope.v0.1.0", "v0.1.0", "v1.37.2"},
		{"v1.37.2", "unknown (not built by make build)", "v1.37.2"},
	} {
		drascope, kubernetes := drascopeVersion(c.gitVersion)
		if drascope != c.drascope || kubernetes != c.kubernetes {
			t.Errorf("drascopeVersion(%q) = %q, %q; want %q, %q", c.gitVersion, drascope, kubernetes, c.drascope, c.kubernetes)
		}
	}
}
