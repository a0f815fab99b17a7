package integration

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// kubectl get shows the CRD's printer columns, and its selectable fields
// work as field selectors. The output is logged: docs/resourcepools.md
// quotes it.
func TestKubectlGetResourcePools(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 4)
	s.addNode("other", 2)
	name := poolObjectName(t, node)
	s.addClaim("one", false)
	s.allocateDirectly("one", node, "gpu-0")
	s.waitForResourcePool(name, "1 of 4 allocated", summaryIs(4, 1, 3, 0))

	var out string
	// kubectl reads through the apiserver, which may lag the watch by a moment.
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		out = kubectl(t, "get", "resourcepools.drascope.dev", "--field-selector", "spec.driver="+driverName+",spec.nodeName="+node)
		return strings.Contains(out, name), nil
	})
	if err != nil {
		t.Fatalf("kubectl get did not list %s:\n%s", name, out)
	}
	t.Logf("kubectl get resourcepools.drascope.dev --field-selector ...:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row (the field selector picks one pool), got:\n%s", out)
	}
	if header := strings.Fields(lines[0]); strings.Join(header, " ") != "NAME DRIVER POOL NODE TOTAL ALLOCATED AVAILABLE UNAVAILABLE AGE" {
		t.Errorf("columns %q", header)
	}
	row := strings.Fields(lines[1])
	if want := []string{name, driverName, node, node, "4", "1", "3", "0"}; len(row) != 9 || strings.Join(row[:8], " ") != strings.Join(want, " ") || !regexp.MustCompile(`^\d+s$`).MatchString(row[8]) {
		t.Errorf("row %q, want %q and an age", row, want)
	}
}
