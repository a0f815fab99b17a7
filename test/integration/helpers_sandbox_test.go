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
	// Its own control plane, on free ports, beside the tests' one; as many
	// nodes as make sandbox, so that the demo is the one docs/sandbox.md
	// shows.
	return exec.CommandContext(ctx, path, append([]string{"--port=0", "--bin-dir=" + env.cp.BinDir}, args...)...)
}

// sandboxDocs are the pages that show the demo's transcript, each in a
// block between the markers of its name; the first shows all of it, and
// make sandbox-doc rewrites it.
var sandboxDocs = []struct{ path, block string }{
	{"../../docs/sandbox.md", "sandbox transcript"},
	{"../../README.md", "sandbox excerpt"},
}

// transcriptBlock finds the block of the given markers.
func transcriptBlock(name string) *regexp.Regexp {
	return regexp.MustCompile("(?s)(<!-- " + name + " -->\n```console\n)(.*?)(```\n<!-- end " + name + " -->)")
}

// volatile are the parts of a transcript that change from run to run: data
// directories, ports, the suffixes of generated names (the alphabet of the
// apiserver's generateName), and which of the demo's filler pods is the
// one left pending or preempted, and which GPU preemption moves.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`drascope-\d+`), "drascope-N"},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "127.0.0.1:PORT"},
	{regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{5}\b`), "-XXXXX"},
	{regexp.MustCompile(`\bfiller-\d+`), "filler-N"},
	{regexp.MustCompile(`\bgpu-\d+ '`), "gpu-N '"}, // the GPU preemption moved
}

// transcriptOutline is what of a demo transcript must stay as the doc shows
// it: the step titles, the commands (without their trailing comments, which
// may count things) and each step's result, in order.
func transcriptOutline(transcript string) []string {
	var outline []string
	for line := range strings.Lines(transcript) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "$ "):
			line, _, _ = strings.Cut(line, "   # ")
		case strings.HasPrefix(line, "=== Step"), strings.HasPrefix(line, "--- Step"), line == "The demo passed every step.":
		default:
			continue
		}
		for _, v := range volatile {
			line = v.re.ReplaceAllString(line, v.with)
		}
		outline = append(outline, strings.TrimSpace(line))
	}
	return outline
}

// checkSandboxDoc fails when a transcript of sandboxDocs has a step title,
// command or result the run's output lacks, or has them in another order.
// With DRASCOPE_UPDATE_SANDBOX_DOC=1 (make sandbox-doc) it writes the run's
// output into the first instead.
func checkSandboxDoc(t *testing.T, out string) {
	t.Helper()
	got := transcriptOutline(out)
	for i, d := range sandboxDocs {
		doc, err := os.ReadFile(d.path)
		if err != nil {
			t.Fatal(err)
		}
		m := transcriptBlock(d.block).FindSubmatchIndex(doc)
		if m == nil {
			t.Fatalf("%s has no <!-- %s --> block", d.path, d.block)
		}
		if i == 0 && os.Getenv("DRASCOPE_UPDATE_SANDBOX_DOC") == "1" {
			if !strings.HasSuffix(out, "\n") {
				out += "\n"
			}
			updated := string(doc[:m[3]]) + out + string(doc[m[6]:])
			if err := os.WriteFile(d.path, []byte(updated), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want := transcriptOutline(string(doc[m[4]:m[5]]))
		next := 0
		for _, line := range got {
			if next < len(want) && line == want[next] {
				next++
			}
		}
		if next < len(want) {
			t.Errorf("%s shows %q (line %d of its outline), which the demo's output lacks or has out of order: the doc is not what the demo does (make sandbox-doc rewrites docs/sandbox.md from a run).\ndoc's outline:\n%s\nrun's outline:\n%s",
				d.path, want[next], next+1, strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
	}
}
