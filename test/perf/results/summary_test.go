package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A summary prints the same tables as the runs it was written from, NaN
// figures (what scheduler_perf did not measure) included, and says how and
// where they were made.
func TestSummaryPrintsTheRunsTables(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: Upstream, Position: 1, ResultFile: "a-up.json", CPUProfile: "a-up-cpu.prof"}, "40", "DynamicResources")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Position: 2, ResultFile: "a-ds.json", HeapProfile: "a-ds-heap.prof",
		ResourcePoolWrites: 90, DueWrites: 60, PublishDelays: 80, PublishDelayP95: 4.096, CatchUpSeconds: 2}, "50", "DRAScope")
	writeCPUProfile(t, filepath.Join(dir, "a-up-cpu.prof"), 10*time.Second, map[string]time.Duration{
		"k8s.io/kubernetes/pkg/scheduler.(*Scheduler).ScheduleOne": 2 * time.Second,
	})
	writeHeapProfile(t, filepath.Join(dir, "a-ds-heap.prof"), map[string]int64{"k8s.io/client-go/tools/cache.(*Reflector).list": 7e6})

	var fromRuns bytes.Buffer
	if err := Render(&fromRuns, []string{dir}, nil, nil); err != nil {
		t.Fatal(err)
	}
	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	summary := filepath.Join(t.TempDir(), "s.json")
	f, err := os.Create(summary)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSummary(f, Summary{Machine: "2 cores (CPU)", Command: "make perf", Commit: "abc1234", Runs: runs}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, name := range []string{"a-up.json", "a-ds.json", "a-up-cpu.prof", "a-ds-heap.prof"} {
		os.Remove(filepath.Join(dir, name)) // a summary stands without them
	}

	var fromSummary bytes.Buffer
	if err := Render(&fromSummary, []string{summary}, nil, nil); err != nil {
		t.Fatal(err)
	}
	header, tables, _ := strings.Cut(fromSummary.String(), "\n\n")
	if want := "`make perf` at abc1234, on 2 cores (CPU):"; header != want {
		t.Errorf("header = %q, want %q", header, want)
	}
	if tables != fromRuns.String() {
		t.Errorf("the summary's tables differ from the runs'.\nsummary:\n%s\nruns:\n%s", tables, fromRuns.String())
	}
	for _, want := range []string{"| T/a | 40.0 (41/45) | 50.0 (41/45) | 1.250 | upstream |", "| T/a | 1 | drascope | 7 | 7 | 180 | – |"} {
		if !strings.Contains(tables, want) {
			t.Errorf("tables lack %q:\n%s", want, tables)
		}
	}

	var one bytes.Buffer
	if err := Render(&one, []string{summary}, []string{"sizing"}, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(one.String(), "pods/s") || !strings.Contains(one.String(), "Scheduler live heap MB") {
		t.Errorf("-tables=sizing printed other tables or not the sizing one:\n%s", one.String())
	}
	if err := Render(&one, []string{summary}, []string{"speed"}, nil); err == nil || !strings.Contains(err.Error(), `unknown table "speed"`) {
		t.Errorf("an unknown table: err = %v, want one naming it", err)
	}
}

func TestReadSummaryRefusesAnotherVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(path, []byte(`{"version": 2, "runs": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSummary(path); err == nil || !strings.Contains(err.Error(), "summary version 2, want 1") {
		t.Errorf("err = %v, want one naming both versions", err)
	}
}
