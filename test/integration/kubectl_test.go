package integration

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drascope/drascope/pkg/localcluster"
)

// kubectl runs bin/kubectl as the cluster admin and returns its output.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	code, out := runAsAdmin(t, "kubectl", args...)
	if code != 0 {
		t.Fatalf("kubectl %s: exit code %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// runAsAdmin runs a binary of bin/ with the cluster admin's kubeconfig and
// returns its exit code and output.
func runAsAdmin(t *testing.T, binary string, args ...string) (int, string) {
	t.Helper()
	path, err := localcluster.BinPath(env.cp.BinDir, binary)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.cp.Kubeconfig("admin", adminToken)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, append([]string{"--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), string(out)
	}
	t.Fatalf("running %s: %v", binary, err)
	return 0, ""
}

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
