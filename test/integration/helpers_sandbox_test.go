package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/drascope/drascope/internal/localcluster"
)

// sandboxDataDir finds the directory the sandbox reported.
var sandboxDataDir = regexp.MustCompile(`Data and logs: (\S+)`)

// processesUnder lists the running processes whose command line names dir:
// the sandbox's etcd, apiserver, controller manager and scheduler do.
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

// checkSandboxCleanedUp: no process left, data removed.
func checkSandboxCleanedUp(t *testing.T, out string) {
	t.Helper()
	m := sandboxDataDir.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the sandbox did not say where its data is:\n%s", out)
	}
	if left := processesUnder(t, m[1]); len(left) > 0 {
		t.Errorf("processes left running after the sandbox stopped: %q", left)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("the sandbox left its data directory %s (%v)", m[1], err)
	}
}

func sandboxCommand(t *testing.T, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	path, err := localcluster.BinPath(env.cp.BinDir, "drascope-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	// Its own control plane, on free ports, beside the tests' one.
	return exec.CommandContext(ctx, path, append([]string{"--port=0", "--nodes=3", "--bin-dir=" + env.cp.BinDir}, args...)...)
}
