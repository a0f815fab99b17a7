package integration

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drascope/drascope/pkg/localcluster"
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

// make sandbox's demo, end to end: every step checks its outcome, and the
// sandbox exits 0 only when all passed.
func TestSandboxDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := sandboxCommand(t, ctx, "--exit-after-demo").CombinedOutput()
	t.Logf("drascope-sandbox --exit-after-demo (%s):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("drascope-sandbox --exit-after-demo: %v", err)
	}
	for _, want := range []string{"--- Step 5: OK", "The demo passed every step."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	checkSandboxCleanedUp(t, string(out))
}

// SIGTERM (as Ctrl-C) stops every process the sandbox started and removes
// its data.
func TestSandboxStopsOnSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := sandboxCommand(t, ctx, "--no-demo")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	reader := bufio.NewReader(stdout)
	for {
		line, err := reader.ReadString('\n')
		out.WriteString(line)
		if strings.Contains(line, "Ctrl-C stops everything") {
			break
		}
		if err != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("the sandbox stopped before it was up: %v\n%s", err, out.String())
		}
	}
	m := sandboxDataDir.FindStringSubmatch(out.String())
	if m == nil || len(processesUnder(t, m[1])) < 4 {
		t.Fatalf("want etcd, kube-apiserver, kube-controller-manager and drascope-scheduler running under the data directory:\n%s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(reader)
	out.Write(rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, out.String())
	}
	checkSandboxCleanedUp(t, out.String())
}
