package results

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// The scheduler's live heap counts allocations under the scheduler's,
// drascope's and the informers' frames, and leaves out the apiserver's,
// its watch cache's list through client-go's reflector too;
// the sizing table shows it beside the process's and the scheduler's cores.
func TestHeapProfileAndSizing(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Position: 1, ResultFile: "a-ds.json",
		CPUProfile: "a-ds-cpu.prof", HeapProfile: "a-ds-heap.prof"}, "40", "DRAScope")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "b", Variant: DRAScope, Position: 1, ResultFile: "b-ds.json"}, "40", "DRAScope")
	writeCPUProfile(t, filepath.Join(dir, "a-ds-cpu.prof"), 10*time.Second, map[string]time.Duration{
		"k8s.io/kubernetes/pkg/scheduler.(*Scheduler).ScheduleOne":     4 * time.Second,
		"k8s.io/apiserver/pkg/endpoints/handlers.UpdateResource.func1": 6 * time.Second,
	})
	writeHeapProfile(t, filepath.Join(dir, "a-ds-heap.prof"), map[string]int64{
		"github.com/drascope/drascope/pkg/poolcache.(*Cache).recompute":                                             300e6,
		"k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive":                                                    500e6,
		"k8s.io/client-go/tools/cache.(*Reflector).list":                                                            100e6,
		"k8s.io/apiserver/pkg/storage/cacher.(*watchCache).processEvent":                                            800e6,
		"k8s.io/apiserver/pkg/storage/cacher.(*Cacher).startCaching;k8s.io/client-go/tools/cache.(*Reflector).list": 100e6,
		"k8s.io/kubernetes/pkg/scheduler/backend/cache.(*cacheImpl).AddPod":                                         50e6,
		"github.com/drascope/drascope/test/perf.fillClaims (the harness, not it)":                                   150e6,
	})

	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := runs[0].Heap, (Heap{ProcessMB: 2000, SchedulerMB: 950}); got != want {
		t.Errorf("heap = %+v, want %+v", got, want)
	}
	var b strings.Builder
	if err := WriteSizing(&b, runs); err != nil {
		t.Fatal(err)
	}
	if want := "| T/a | 1 | drascope | 950 | 2000 | 180 | 0.40 |\n"; !strings.Contains(b.String(), want) {
		t.Errorf("sizing table lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(b.String(), "T/b") {
		t.Errorf("sizing table lists a run without a heap profile:\n%s", b.String())
	}

	if _, err := ReadHeapProfile(filepath.Join(dir, "a-ds-cpu.prof")); err == nil || !strings.Contains(err.Error(), "not a heap profile") {
		t.Errorf("reading a CPU profile as a heap profile: err = %v, want one saying it is not a heap profile", err)
	}
}

// writeHeapProfile writes a heap profile with one sample per stack (its
// functions, callers first, separated by ";"), of the given live bytes.
func writeHeapProfile(t *testing.T, path string, inuse map[string]int64) {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:     512 * 1024,
	}
	for stack, bytes := range inuse {
		// A sample's stack is leaf first.
		names := append(strings.Split(stack, ";"), "runtime.goexit")
		slices.Reverse(names[:len(names)-1])
		var locs []*profile.Location
		for _, name := range names {
			id := uint64(len(p.Function) + 1)
			fn := &profile.Function{ID: id, Name: name}
			loc := &profile.Location{ID: id, Line: []profile.Line{{Function: fn}}}
			p.Function = append(p.Function, fn)
			p.Location = append(p.Location, loc)
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{1, 2 * bytes, 1, bytes}})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
}
