package results

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// A result file as scheduler_perf writes it, trimmed to what the report reads.
const resultJSON = `{"version":"v1","dataItems":[
 {"data":{"Average":40,"Perc50":41,"Perc90":45,"Perc95":46,"Perc99":47},"unit":"pods/s","labels":{"Metric":"SchedulingThroughput","Name":"x"}},
 {"data":{"Average":0.3,"Perc50":0.2,"Perc90":0.5,"Perc95":0.6,"Perc99":0.9},"unit":"ms","labels":{"Metric":"drascope_resourcepool_snapshot_delay_seconds"}},
 {"data":{"Average":100,"Max":180,"Perc50":90},"unit":"MB","labels":{"Metric":"heap_memory_usage"}},
 {"data":{"Average":1,"Perc50":1.5,"Perc99":4},"unit":"ms","labels":{"Metric":"scheduler_plugin_execution_duration_seconds","plugin":"PLUGIN","extension_point":"PreFilter"}},
 {"data":{"Average":9,"Perc50":9,"Perc99":9},"unit":"ms","labels":{"Metric":"scheduler_plugin_execution_duration_seconds","plugin":"OTHER","extension_point":"PreFilter"}},
 {"data":{"Average":3,"Perc50":2.5,"Perc99":12},"unit":"ms","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","result":"scheduled"}},
 {"data":{"Average":30,"Perc50":25,"Perc99":120},"unit":"ms","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","result":"unschedulable"}},
 {"data":{"Average":2,"Perc50":1.25,"Perc99":8},"unit":"ms","labels":{"Metric":"scheduler_scheduling_algorithm_duration_seconds"}}
]}`

func writeRun(t *testing.T, dir string, e IndexEntry, throughput, plugin string) {
	t.Helper()
	data := strings.Replace(resultJSON, `"Average":40`, `"Average":`+throughput, 1)
	data = strings.Replace(data, "PLUGIN", plugin, 1)
	if err := os.WriteFile(filepath.Join(dir, e.ResultFile), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := AppendIndex(dir, e); err != nil {
		t.Fatal(err)
	}
}

func TestLoadAndCompare(t *testing.T) {
	dir := t.TempDir()
	// Workload a: upstream first; b: DRAScope first; c: DRAScope only.
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: Upstream, Position: 1, ResultFile: "a-up.json"}, "40", "DynamicResources")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Position: 2, ResultFile: "a-ds.json", ResourcePoolWrites: 7}, "39", "DRAScope")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "b", Variant: DRAScope, Position: 1, ResultFile: "b-ds.json"}, "50", "DRAScope")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "b", Variant: Upstream, Position: 2, ResultFile: "b-up.json"}, "40", "DynamicResources")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "c", Variant: DRAScope, Position: 1, ResultFile: "c-ds.json"}, "40", "DRAScope")
	// d: -perf-variants=drascope,drascope-bestfit left upstream out, which
	// is no error, and no row.
	chosen := []string{DRAScope, DRAScopeBestFit}
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "d", Variant: DRAScope, Position: 1, ResultFile: "d-ds.json", Variants: chosen}, "40", "DRAScope")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "d", Variant: DRAScopeBestFit, Position: 2, ResultFile: "d-bf.json", Variants: chosen}, "40", "DRAScope")

	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 7 {
		t.Fatalf("loaded %d runs, want 7", len(runs))
	}
	if got := runs[1].PreFilterMs.P50; got != 1.5 {
		t.Errorf("DRAScope's PreFilter p50 = %v, want 1.5 (its own plugin's series, not another's)", got)
	}
	if got := runs[0].PreFilterMs.P50; got != 1.5 {
		t.Errorf("upstream's PreFilter p50 = %v, want 1.5 from the DynamicResources series", got)
	}
	if got := runs[0].PeakHeapMB; got != 180 {
		t.Errorf("peak heap = %v, want the Max of heap_memory_usage, 180", got)
	}
	if !math.IsNaN(runs[0].FilterMs.P50) {
		t.Errorf("a figure missing from the result file must be NaN, got %v", runs[0].FilterMs.P50)
	}

	rows, err := Compare(runs)
	if err == nil || !strings.Contains(err.Error(), "T/c: ran with only one variant") || strings.Contains(err.Error(), "T/d") {
		t.Errorf("Compare error = %v, want T/c reported and not T/d", err)
	}
	if len(rows) != 2 || rows[0].Workload != "T/a" || rows[1].Workload != "T/b" {
		t.Fatalf("rows = %+v, want T/a then T/b", rows)
	}
	if rows[0].Ratio != 39.0/40 || rows[1].Ratio != 50.0/40 {
		t.Errorf("ratios = %v, %v; want DRAScope over upstream, 0.975 and 1.25", rows[0].Ratio, rows[1].Ratio)
	}
	if rows[0].DRAScopeFirst || !rows[1].DRAScopeFirst {
		t.Errorf("DRAScopeFirst = %v, %v; want false, true", rows[0].DRAScopeFirst, rows[1].DRAScopeFirst)
	}

	tableHas(t, rows,
		"| T/a | 40.0 (41/45) | 39.0 (41/45) | 0.975 | upstream |",
		"| T/b | 40.0 (41/45) | 50.0 (41/45) | 1.250 | drascope |",
		"| T/a | 1.250/8.000; 1.250/8.000 | 2.500/12.000; 2.500/12.000 | 1.500/4.000; 1.500/4.000 | –/–; –/– | 180; 180 | 0; 0 |",
		"| T/a | –; – | –; – | 0.200/0.900 | 7 (0; –) | – | 0.0 |",
	)
}

func TestLoadSeveralDirectories(t *testing.T) {
	// Two commands, one workload each, into directories of their own,
	// with the same file names: each index's files are read from its own
	// directory.
	first, second := t.TempDir(), t.TempDir()
	writeRun(t, first, IndexEntry{TestCase: "T", Workload: "a", Variant: Upstream, Position: 1, ResultFile: "up.json"}, "40", "DynamicResources")
	writeRun(t, first, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Position: 2, ResultFile: "ds.json"}, "20", "DRAScope")
	writeRun(t, second, IndexEntry{TestCase: "T", Workload: "b", Variant: Upstream, Position: 1, ResultFile: "up.json"}, "10", "DynamicResources")
	writeRun(t, second, IndexEntry{TestCase: "T", Workload: "b", Variant: DRAScope, Position: 2, ResultFile: "ds.json"}, "30", "DRAScope")

	runs, err := Load(first, second)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Compare(runs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range rows {
		got[r.Workload] = r.Ratio
	}
	if want := map[string]float64{"T/a": 0.5, "T/b": 3}; !maps.Equal(got, want) {
		t.Errorf("ratios by workload = %v, want %v", got, want)
	}

	// The same runs twice would make the median of a duplicate.
	if _, err := Load(first, second, first); err == nil || !strings.Contains(err.Error(), "T/a upstream pair 1 ran in") {
		t.Errorf("Load of a directory given twice: error = %v, want one naming the run found twice", err)
	}
}

func TestLoadRejectsBrokenIndex(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte("{\"testCase\":\"T\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Load error = %v, want one naming line 2", err)
	}
}

func TestComparePairs(t *testing.T) {
	dir := t.TempDir()
	// Three pairs of T/a with ratios 1.2, 0.8 and 1.0 (DRAScope first in the
	// second pair); a fourth pair lost its upstream run.
	for _, p := range []struct {
		pair               int
		upstream, drascope string
		drascopeFirst      bool
	}{{1, "50", "60", false}, {2, "50", "40", true}, {3, "40", "40", false}} {
		up, ds := 1, 2
		if p.drascopeFirst {
			up, ds = 2, 1
		}
		writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: Upstream, Pair: p.pair, Position: up,
			ResultFile: fmt.Sprintf("a-up-%d.json", p.pair)}, p.upstream, "DynamicResources")
		writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Pair: p.pair, Position: ds,
			ResultFile: fmt.Sprintf("a-ds-%d.json", p.pair), ResourcePoolWrites: p.pair}, p.drascope, "DRAScope")
	}
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Pair: 4, Position: 1, ResultFile: "a-ds-4.json"}, "10", "DRAScope")

	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Compare(runs)
	if err == nil || !strings.Contains(err.Error(), "T/a pair 4: ran with only one variant") {
		t.Errorf("Compare error = %v, want the incomplete pair 4 reported", err)
	}
	if len(rows) != 1 {
		t.Fatalf("rows = %+v, want one for T/a", rows)
	}
	r := rows[0]
	if r.Ratio != 1.0 || r.Upstream.Pair != 3 || r.DRAScope.Pair != 3 {
		t.Errorf("median pair: ratio %v, pairs %d/%d; want 1.0 from pair 3", r.Ratio, r.Upstream.Pair, r.DRAScope.Pair)
	}
	if want := []float64{0.8, 1.0, 1.2}; !slices.Equal(r.Ratios, want) {
		t.Errorf("ratios = %v, want %v", r.Ratios, want)
	}

	tableHas(t, rows,
		"| T/a | 40.0 (41/45) | 40.0 (41/45) | 1.000 (3 pairs: 0.800–1.200; geometric mean 0.986) | upstream |",
		"| T/a | 1.250/8.000; 1.250/8.000 | 2.500/12.000; 2.500/12.000 | 1.500/4.000; 1.500/4.000 | –/–; –/– | 180; 180 |",
		"| T/a | –; – | –; – | 0.200/0.900 | 3 (0; –) |",
	)
}

// The SchedulerPreQueueingHints pair is a row of its own, beside the plain
// pair of the same workload, and its upstream run reads the
// DynamicResources series. The freshness figures and the CPU per pod come
// from the DRAScope run's index entry and the runs' CPU profiles.
func TestPreQueueingHintsRowsAndCost(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: Upstream, Position: 1, ResultFile: "a-up.json", CPUProfile: "a-up-cpu.prof"}, "40", "DynamicResources")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScope, Position: 2, ResultFile: "a-ds.json",
		ResourcePoolWrites: 90, DueWrites: 60, PublishDelays: 80, PublishDelayP95: 4.096, CatchUpSeconds: 2}, "50", "DRAScope")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: DRAScopePreQueueingHints, Position: 3, ResultFile: "a-dsq.json"}, "80", "DRAScope")
	writeRun(t, dir, IndexEntry{TestCase: "T", Workload: "a", Variant: UpstreamPreQueueingHints, Position: 4, ResultFile: "a-upq.json"}, "100", "DynamicResources")
	// 10 s of profile at 40 pods/s: 400 pods. 2 s in scheduler code, 1 s
	// elsewhere.
	writeCPUProfile(t, filepath.Join(dir, "a-up-cpu.prof"), 10*time.Second, map[string]time.Duration{
		"k8s.io/kubernetes/pkg/scheduler.(*Scheduler).ScheduleOne":          1500 * time.Millisecond,
		"github.com/drascope/drascope/pkg/poolcache.(*Cache).recompute":     500 * time.Millisecond,
		"k8s.io/apiserver/pkg/endpoints/handlers.UpdateResource.func1":      time.Second,
		"github.com/drascope/drascope/test/perf.fillClaims (not scheduler)": 0,
	})

	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := runs[3].PreFilterMs.P50; got != 1.5 {
		t.Errorf("the gated upstream run's PreFilter p50 = %v, want 1.5 from the DynamicResources series", got)
	}
	if got, want := runs[0].CPU, (CPU{Seconds: 10, Process: 3, Scheduler: 2}); got != want {
		t.Errorf("CPU = %+v, want %+v", got, want)
	}
	rows, err := Compare(runs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Workload != "T/a" || rows[1].Workload != "T/a"+PreQueueingHintsRow {
		t.Fatalf("rows = %+v, want T/a and T/a with the gate", rows)
	}
	if rows[1].Ratio != 0.8 {
		t.Errorf("gated ratio = %v, want 80/100", rows[1].Ratio)
	}
	tableHas(t, rows,
		"| T/a (SchedulerPreQueueingHints) | 100.0 (41/45) | 80.0 (41/45) | 0.800 | drascope |",
		"| T/a | 5.00; – | 7.50; – | 0.200/0.900 | 90 (60; –) | ≤ 4.096 s (80) | 2.0 |",
	)
}

// writeCPUProfile writes a CPU profile of the given duration with one
// sample per function, of the given CPU time.
func writeCPUProfile(t *testing.T, path string, d time.Duration, samples map[string]time.Duration) {
	t.Helper()
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DurationNanos: int64(d),
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        int64(10 * time.Millisecond),
	}
	for name, cpu := range samples {
		id := uint64(len(p.Function) + 1)
		fn := &profile.Function{ID: id, Name: name}
		caller := &profile.Function{ID: id + 1000, Name: "runtime.goexit"}
		loc := &profile.Location{ID: id, Line: []profile.Line{{Function: fn}}}
		root := &profile.Location{ID: id + 1000, Line: []profile.Line{{Function: caller}}}
		p.Function = append(p.Function, fn, caller)
		p.Location = append(p.Location, loc, root)
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc, root}, Value: []int64{int64(cpu / (10 * time.Millisecond)), int64(cpu)}})
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

// tableHas fails t unless WriteMarkdown's output for rows holds every line.
func tableHas(t *testing.T, rows []Row, lines ...string) {
	t.Helper()
	var out strings.Builder
	if err := WriteMarkdown(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range lines {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestWriteFragmentation(t *testing.T) {
	run := func(variant string, placed int) Run {
		return Run{IndexEntry: IndexEntry{TestCase: "Fragmentation", Workload: "100nodes", Variant: variant, BigPods: 50, BigPodsPlaced: placed},
			Throughput: Quantiles{Average: 90, P50: 85, P90: 98}}
	}
	runs := []Run{run(DRAScopeLeastAllocated, 0), run(DRAScopeMostAllocated, 50), {IndexEntry: IndexEntry{TestCase: "Other", Variant: Upstream}}, run(Upstream, 0), run(DRAScope, 0)}
	var b strings.Builder
	if err := WriteFragmentation(&b, runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| Fragmentation/100nodes | 1 | upstream | 0 of 50 |",
		"| Fragmentation/100nodes | 1 | drascope | 0 of 50 |",
		"| Fragmentation/100nodes | 1 | drascope-mostallocated | 50 of 50 |",
		"| Fragmentation/100nodes | 1 | drascope-leastallocated | 0 of 50 |",
	}
	if len(lines) != 2+len(want) {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[2+i], w) {
			t.Errorf("row %d: %q, want it to start %q", i, lines[2+i], w)
		}
	}
	b.Reset()
	if err := WriteFragmentation(&b, runs[2:3]); err != nil || b.Len() != 0 {
		t.Errorf("no 8-GPU pods: %q, %v; want nothing", b.String(), err)
	}
}

func TestWriteGangs(t *testing.T) {
	run := func(variant string, placed, members int, seconds float64) Run {
		return Run{IndexEntry: IndexEntry{TestCase: "Gangs", Workload: "64nodes", Variant: variant, Gangs: 4, GangsPlaced: placed, GangMembersPlaced: members, GangSeconds: seconds},
			Throughput: Quantiles{Average: 90, P50: 85, P90: 98}}
	}
	runs := []Run{run(DRAScopeMostAllocated, 2, 16, 3.4), {IndexEntry: IndexEntry{TestCase: "Other", Variant: Upstream}}, run(Upstream, 0, 0, 0), run(DRAScope, 0, 0, 0)}
	var b strings.Builder
	if err := WriteGangs(&b, runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| Gangs/64nodes | 1 | upstream | 0 of 4 | 0 | 0 | – | 90.0 (85/98) |",
		"| Gangs/64nodes | 1 | drascope | 0 of 4 | 0 | 0 | – | 90.0 (85/98) |",
		"| Gangs/64nodes | 1 | drascope-mostallocated | 2 of 4 | 16 | 0 | 3 s | 90.0 (85/98) |",
	}
	if len(lines) != 2+len(want) {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, w := range want {
		if lines[2+i] != w {
			t.Errorf("row %d: %q, want %q", i, lines[2+i], w)
		}
	}
	b.Reset()
	if err := WriteGangs(&b, runs[1:2]); err != nil || b.Len() != 0 {
		t.Errorf("no gangs: %q, %v; want nothing", b.String(), err)
	}
}

// The publishing table lists DRAScope's runs with and without publishing
// and upstream's, of the workloads that ran both DRAScope variants, and
// nothing else.
func TestWritePublishing(t *testing.T) {
	run := func(workload, variant string, writes int) Run {
		return Run{IndexEntry: IndexEntry{TestCase: "T", Workload: workload, Variant: variant, ResourcePoolWrites: writes, DueWrites: writes / 2,
			WindowWrites: writes / 4, WindowSeconds: 10.04, WindowProcessCPU: 15.06, WindowEtcdCPU: 2.51, WriteFloor: writes * 3 / 5, WindowWriteFloor: writes / 5, PublishDelays: writes, PublishDelayP95: 8.192, PublishDelayP99: -16.384, FirstPublications: writes / 10, FirstPublishDelayP95: -2097.152, FirstPublicationSeconds: float64(writes),
			WindowPublishDelays: writes / 4, WindowPublishDelayP95: 7.5, WindowPublishDelayP99: 10},
			Throughput: Quantiles{Average: 30, P50: 31, P90: 40}}
	}
	old := run("a", Upstream, 0)
	old.Pair, old.WindowProcessCPU = 2, 0
	runs := []Run{run("a", DRAScopeNoPublish, 0), run("a", Upstream, 0), run("a", DRAScope, 100), run("b", DRAScope, 50), old}
	var b strings.Builder
	if err := WritePublishing(&b, runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| T/a | 1 | upstream | 30.0 (31/40) | 1.50; 0.25 | 0 (0; 0 in 10.0 s) | – | – | – | – |",
		"| T/a | 1 | drascope | 30.0 (31/40) | 1.50; 0.25 | 100 (50; 25 in 10.0 s) | 60 (20) | ≤ 8.192 s (100); window ≤ 7.500 s (25) | > 16.384 s; ≤ 10.000 s | > 2097.152 s (10); 100 s |",
		"| T/a | 1 | drascope-nopublish | 30.0 (31/40) | 1.50; 0.25 | 0 (0; 0 in 10.0 s) | – | – | – | – |",
		// Recorded before the harness measured the window's CPU.
		"| T/a | 2 | upstream | 30.0 (31/40) | – | 0 (0; 0 in 10.0 s) | – | – | – | – |",
	}
	if len(lines) != 2+len(want) {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, w := range want {
		if lines[2+i] != w {
			t.Errorf("row %d: %q, want %q", i, lines[2+i], w)
		}
	}
}

// A p95 beyond the histogram's last bucket is kept as the negated bound,
// JSON having no infinity, and printed as more than it.
func TestPublishDelayBeyondTheLastBucket(t *testing.T) {
	if got, want := publishDelay(Run{IndexEntry: IndexEntry{PublishDelays: 5, PublishDelayP95: -32.768}}), "> 32.768 s (5)"; got != want {
		t.Errorf("publishDelay = %q, want %q", got, want)
	}
}

// The device-choice table lists the runs of the workloads that ran BestFit
// or the device-choice test cases, with each figure as a share of what it
// is measured against.
func TestWriteDeviceChoice(t *testing.T) {
	tp := Quantiles{Average: 30, P50: 31, P90: 40}
	runs := []Run{
		{IndexEntry: IndexEntry{TestCase: "DeviceChoicePartitions", Workload: "w", Variant: DRAScope, WholePods: 100, WholePodsPlaced: 40, WholePodsOptimum: 80}, Throughput: tp},
		{IndexEntry: IndexEntry{TestCase: "DeviceChoiceTopology", Workload: "w", Variant: DRAScopeBestFit, PairPods: 10, PairPodsPlaced: 8, PairsOneRoot: 6}, Throughput: tp},
		{IndexEntry: IndexEntry{TestCase: "DeviceChoicePartitions", Workload: "w", Variant: Upstream, WholePods: 100}, Throughput: tp},
		{IndexEntry: IndexEntry{TestCase: "Scale", Workload: "x", Variant: DRAScopeBestFit}, Throughput: tp},
		{IndexEntry: IndexEntry{TestCase: "Scale", Workload: "x", Variant: DRAScopeNoPublish}, Throughput: tp},
		{IndexEntry: IndexEntry{TestCase: "Other", Workload: "w", Variant: DRAScope, BigPods: 3}, Throughput: tp},
	}
	var b strings.Builder
	if err := WriteDeviceChoice(&b, runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| DeviceChoicePartitions/w | 1 | upstream | 30.0 (31/40) | 0 (– of 0; 100) | – |",
		"| DeviceChoicePartitions/w | 1 | drascope | 30.0 (31/40) | 40 (50% of 80; 100) | – |",
		"| DeviceChoiceTopology/w | 1 | drascope-bestfit | 30.0 (31/40) | – | 6 (75% of 8; 10) |",
		"| Scale/x | 1 | drascope-bestfit | 30.0 (31/40) | – | – |",
	}
	if len(lines) != 2+len(want) {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, w := range want {
		if lines[2+i] != w {
			t.Errorf("row %d: %q, want %q", i, lines[2+i], w)
		}
	}
}

// A run that left upstream out (-perf-variants) has no rows, and no empty
// tables.
func TestWriteMarkdownWithoutRowsPrintsNothing(t *testing.T) {
	var out strings.Builder
	if err := WriteMarkdown(&out, nil); err != nil || out.Len() != 0 {
		t.Errorf("WriteMarkdown(nil) = %q, %v; want nothing", out.String(), err)
	}
}

// The pruning table lists the runs that pruned, with the fallback's share
// of the answers that needed the check; runs without pruning print nothing.
func TestWritePruning(t *testing.T) {
	runs := []Run{
		{IndexEntry: IndexEntry{TestCase: "SteadyStateAtScale", Workload: "full_500nodes", Variant: DRAScope, Pruning: &Pruning{Everywhere: 5, Indexed: 90, Fallback: 10, MemoAccepted: 900, MemoRan: 100}}},
		{IndexEntry: IndexEntry{TestCase: "SteadyStateAtScale", Workload: "full_500nodes", Variant: Upstream}},
		{IndexEntry: IndexEntry{TestCase: "SteadyStateAtScale", Workload: "full_500nodes", Variant: DRAScopeNoPublish, Pruning: &Pruning{}}},
	}
	var b strings.Builder
	if err := WritePruning(&b, runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if want := "| SteadyStateAtScale/full_500nodes | 1 | drascope | 5 | 90 | 10 (10%) | 900 (90%) | 100 | 0 |"; len(lines) != 3 || lines[2] != want {
		t.Errorf("table:\n%s\nwant its one row %q", b.String(), want)
	}
	b.Reset()
	if err := WritePruning(&b, runs[1:]); err != nil || b.Len() != 0 {
		t.Errorf("nothing pruned: %q, %v; want nothing", b.String(), err)
	}
}

// A workload whose runs measured no throughput (too short for a sample) has
// only NaN ratios; its median pair must not depend on map order.
func TestCompareMedianPairWithoutFigures(t *testing.T) {
	nan := Quantiles{math.NaN(), math.NaN(), math.NaN(), math.NaN()}
	var runs []Run
	for pair := 1; pair <= 3; pair++ {
		// DRAScope runs first in pair 2 only.
		up, ds := 1, 2
		if pair == 2 {
			up, ds = 2, 1
		}
		runs = append(runs,
			Run{IndexEntry: IndexEntry{TestCase: "T", Workload: "short", Variant: Upstream, Pair: pair, Position: up}, Throughput: nan},
			Run{IndexEntry: IndexEntry{TestCase: "T", Workload: "short", Variant: DRAScope, Pair: pair, Position: ds}, Throughput: nan})
	}
	for range 20 {
		rows, err := Compare(runs)
		if err != nil || len(rows) != 1 {
			t.Fatalf("Compare = %+v, %v; want one row", rows, err)
		}
		if r := rows[0]; r.DRAScope.Pair != 2 || !r.DRAScopeFirst {
			t.Fatalf("median pair %d (DRAScope first: %v), want pair 2, the middle one", r.DRAScope.Pair, r.DRAScopeFirst)
		}
	}
}

// The SLI table: the median pair's SLI in seconds, every pair's p50 and
// p99 ratios, and the attempts per pod (scheduler_perf's ms scaling of
// every histogram undone). A summary keeps them, and a summary written
// before them reads as not measured.
func TestWriteSLI(t *testing.T) {
	run := func(variant string, pair int, p50, p99, attempts float64) Run {
		r := Run{IndexEntry: IndexEntry{TestCase: "Churn", Workload: "a", Variant: variant, Pair: pair},
			Throughput: Quantiles{Average: 20}, SLIMs: Quantiles{P50: p50, P90: p99, P99: p99}, Attempts: Quantiles{Average: attempts}}
		return r
	}
	runs := []Run{
		run(Upstream, 1, 2000, 8000, 1.5), run(DRAScope, 1, 400, 4000, 1.1),
		run(Upstream, 2, 1000, 6000, 1.4), run(DRAScope, 2, 400, 3000, 1.2),
	}
	rows, err := Compare(runs)
	if err != nil {
		t.Fatal(err)
	}
	tableHas(t, rows,
		"| Churn/a | 2.000/8.000/8.000; 0.400/4.000/4.000 | 0.200 (2 pairs: 0.200–0.400; geometric mean 0.283) | 0.500 (2 pairs: 0.500–0.500; geometric mean 0.500) | 1.50; 1.10 |")
	var b strings.Builder
	if err := WriteSummary(&b, Summary{Machine: "m", Command: "c", Commit: "x", Runs: runs[:1]}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSummary(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Runs[0]; got.SLIMs.P50 != 2000 || got.Attempts.Average != 1.5 {
		t.Errorf("summary round trip: SLI %+v, attempts %+v", got.SLIMs, got.Attempts)
	}
	old := strings.ReplaceAll(strings.ReplaceAll(b.String(), `"sliMs"`, `"x"`), `"attempts"`, `"y"`)
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if back, err = ReadSummary(path); err != nil {
		t.Fatal(err)
	} else if !math.IsNaN(back.Runs[0].SLIMs.P50) || !math.IsNaN(back.Runs[0].Attempts.Average) {
		t.Errorf("a summary without the SLI reads as %+v, %+v; want not measured", back.Runs[0].SLIMs, back.Runs[0].Attempts)
	}
}
