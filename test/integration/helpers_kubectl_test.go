package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/drascope/drascope/internal/localcluster"
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
