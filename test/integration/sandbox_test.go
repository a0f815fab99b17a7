package integration

import (
	"bufio"
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// make sandbox's demo, end to end: every step checks its outcome, and the
// sandbox exits 0 only when all passed; docs/sandbox.md shows what it does.
func TestSandboxDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := sandboxCommand(t, ctx, "--exit-after-demo").CombinedOutput()
	t.Logf("drascope-sandbox --exit-after-demo (%s):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("drascope-sandbox --exit-after-demo: %v", err)
	}
	for _, want := range []string{"persisted the report as a DeviceTaintRule", "drascope.dev/unhealthy   NoSchedule", "--- Step 5: OK", "both halves are on", "--- Step 8: OK", "all three run: one whole GPU", "--- Step 9: OK", "The demo passed every step."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	checkSandboxCleanedUp(t, string(out))
	checkSandboxDoc(t, string(out))
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
