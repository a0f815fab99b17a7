// Package results reads what a test/perf run leaves in its data directory
// (scheduler_perf's JSON files and the harness's index of runs) and turns it
// into the side-by-side table of docs/perf.md.
package results

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The two variants compared, as scheduler_perf topics, those that test
// cases labelled "scoring" run besides, and the pair that workloads labelled
// "prequeueinghints" run besides (both schedulers with the alpha
// SchedulerPreQueueingHints gate on).
const (
	Upstream                 = "upstream"
	DRAScope                 = "drascope"
	DRAScopeMostAllocated    = "drascope-mostallocated"
	DRAScopeLeastAllocated   = "drascope-leastallocated"
	UpstreamPreQueueingHints = "upstream-prequeueinghints"
	DRAScopePreQueueingHints = "drascope-prequeueinghints"
	// DRAScopeNoPublish runs besides the others in workloads labelled
	// "publishing": DRAScope with ResourcePool publishing off.
	DRAScopeNoPublish = "drascope-nopublish"
	// DRAScopeBestFit runs besides the others in test cases labelled
	// "devicechoice": DRAScope with deviceChoice BestFit.
	DRAScopeBestFit = "drascope-bestfit"
)

// PreQueueingHintsRow ends the name of the rows that compare the
// SchedulerPreQueueingHints pair.
const PreQueueingHintsRow = " (SchedulerPreQueueingHints)"

// IndexFile is the harness's record of runs, one JSON object per line.
const IndexFile = "drascope-perf-index.jsonl"

// IndexEntry is one run of one workload with one variant.
type IndexEntry struct {
	TestCase string `json:"testCase"`
	Workload string `json:"workload"`
	Variant  string `json:"variant"`
	// Pair numbers the runs of a workload with -perf-pairs, from 1; an
	// index without it (0) has one pair.
	Pair int `json:"pair,omitempty"`
	// Position is the variant's place in the order the workload ran its
	// variants, from 1.
	Position int `json:"position"`
	// ResultFile is scheduler_perf's JSON file, in the same directory.
	ResultFile string `json:"resultFile"`
	// Variants are the variants the workload ran with in this pair, when
	// -perf-variants chose them; empty means every variant of the workload.
	Variants []string `json:"variants,omitempty"`
	// Seconds is the run's wall time, set-up included.
	Seconds float64 `json:"seconds"`
	// CPUProfile is scheduler_perf's CPU profile of the measured phase
	// (-perf-cpuprofile), in the same directory.
	CPUProfile string `json:"cpuProfile,omitempty"`
	// HeapProfile is the harness's heap profile at the end of the run,
	// after a garbage collection, in the same directory.
	HeapProfile string `json:"heapProfile,omitempty"`
	// ResourcePoolWrites counts the publisher's writes during the whole
	// run; DueWrites those that went ahead of the write budget because their
	// change was due.
	ResourcePoolWrites int `json:"resourcePoolWrites"`
	DueWrites          int `json:"dueWrites,omitempty"`
	// WindowWrites counts the writes inside the measured window (first
	// measured pod created to last one bound, WindowSeconds long): the
	// writes the measured throughput paid for, without the set-up's first
	// publication.
	WindowWrites  int     `json:"windowWrites,omitempty"`
	WindowSeconds float64 `json:"windowSeconds,omitempty"`
	// WindowProcessCPU and WindowEtcdCPU are the CPU seconds spent inside
	// the same window by the harness's process (apiserver, controllers,
	// scheduler) and by its etcd, a child process that the CPU profile
	// does not see.
	WindowProcessCPU float64 `json:"windowProcessCPU,omitempty"`
	WindowEtcdCPU    float64 `json:"windowEtcdCPU,omitempty"`
	// WriteFloor and WindowWriteFloor are the fewest writes that could
	// have kept every change within maxPublishDelay, over the run (after
	// set-up) and inside the window (drascope_resourcepool_write_floor_total).
	WriteFloor       int `json:"writeFloor,omitempty"`
	WindowWriteFloor int `json:"windowWriteFloor,omitempty"`
	// PublishDelays counts the publisher's status writes during the whole
	// run, and PublishDelayP95 bounds the 95th percentile of their delay
	// (seconds, change seen to status written): the upper bound of the
	// histogram bucket that holds it; negative beyond the last bucket, whose
	// bound it then is (more than that).
	PublishDelays   int     `json:"publishDelays,omitempty"`
	PublishDelayP95 float64 `json:"publishDelayP95,omitempty"`
	// PublishDelayP99 bounds the 99th percentile the same way.
	PublishDelayP99 float64 `json:"publishDelayP99,omitempty"`
	// WindowPublishDelays counts the status writes inside the measured
	// window, and WindowPublishDelayP95 and P99 bound their quantiles the
	// same way: the steady state's freshness, without the set-up's
	// bursts (a first publication, every fill claim allocated at once).
	WindowPublishDelays   int     `json:"windowPublishDelays,omitempty"`
	WindowPublishDelayP95 float64 `json:"windowPublishDelayP95,omitempty"`
	WindowPublishDelayP99 float64 `json:"windowPublishDelayP99,omitempty"`
	// FirstPublications counts the ResourcePools created during the run,
	// and FirstPublishDelayP95 bounds the 95th percentile of their delay
	// (a new pool's first change to its object's creation), as
	// PublishDelayP95 does.
	FirstPublications    int     `json:"firstPublications,omitempty"`
	FirstPublishDelayP95 float64 `json:"firstPublishDelayP95,omitempty"`
	// FirstPublicationSeconds is the time from the first ResourceSlice's
	// creation to the last ResourcePool's, from the objects' creation
	// timestamps (whole seconds): how long after the pools appeared every
	// one was published.
	FirstPublicationSeconds float64 `json:"firstPublicationSeconds,omitempty"`
	// Pruning counts how node pruning's availability index answered the
	// run's pods (drascope_node_pruning_total).
	Pruning *Pruning `json:"pruning,omitempty"`
	// CatchUpSeconds is how long the ResourcePools took to agree with the
	// claims after the measured phase.
	CatchUpSeconds float64 `json:"catchUpSeconds,omitempty"`
	// UnhealthyAllocated counts devices reported Unhealthy that the
	// scheduler allocated.
	UnhealthyAllocated int `json:"unhealthyAllocated"`
	// BigPods and BigPodsPlaced count the Fragmentation test case's 8-GPU
	// pods: created, and bound.
	BigPods       int `json:"bigPods,omitempty"`
	BigPodsPlaced int `json:"bigPodsPlaced,omitempty"`
	// WholePods and WholePodsPlaced count the DeviceChoicePartitions test
	// case's whole-GPU pods: created, and bound; WholePodsOptimum is how
	// many an offline optimum could place beside the partitions that were
	// placed.
	WholePods        int `json:"wholePods,omitempty"`
	WholePodsPlaced  int `json:"wholePodsPlaced,omitempty"`
	WholePodsOptimum int `json:"wholePodsOptimum,omitempty"`
	// PairPods, PairPodsPlaced and PairsOneRoot count the
	// DeviceChoiceTopology test case's 2-GPU pods: created, bound, and
	// bound with both GPUs under one PCIe root.
	PairPods       int `json:"pairPods,omitempty"`
	PairPodsPlaced int `json:"pairPodsPlaced,omitempty"`
	PairsOneRoot   int `json:"pairsOneRoot,omitempty"`
	// UrgentPods and UrgentPodsPlaced count the PreemptionOnFullCluster
	// test case's preemptors: created, and bound; UrgentSeconds is the time
	// from the first one's creation until the last placed was bound (1 s
	// resolution: the PodScheduled condition's). Victims sums the
	// scheduler's preemption_victims.
	UrgentPods       int     `json:"urgentPods,omitempty"`
	UrgentPodsPlaced int     `json:"urgentPodsPlaced,omitempty"`
	UrgentSeconds    float64 `json:"urgentSeconds,omitempty"`
	Victims          int     `json:"victims,omitempty"`
	// Gangs, GangsPlaced, GangMembersPlaced and PartialGangs count the
	// Gangs test case's PodGroups: created, placed whole, their members
	// bound, and those partly placed or holding devices for an unbound
	// member (never expected). GangSeconds is the time from the first
	// member's creation until the last bound member's PodScheduled
	// condition.
	Gangs             int     `json:"gangs,omitempty"`
	GangsPlaced       int     `json:"gangsPlaced,omitempty"`
	GangMembersPlaced int     `json:"gangMembersPlaced,omitempty"`
	PartialGangs      int     `json:"partialGangs,omitempty"`
	GangSeconds       float64 `json:"gangSeconds,omitempty"`
}

// AppendIndex adds an entry to dir's index.
func AppendIndex(dir string, e IndexEntry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, IndexFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dataItems is scheduler_perf's JSON result format (perf-dash's).
type dataItems struct {
	DataItems []struct {
		Data   map[string]float64 `json:"data"`
		Unit   string             `json:"unit"`
		Labels map[string]string  `json:"labels"`
	} `json:"dataItems"`
}

// Run is one index entry with the figures of its result file. A figure that
// scheduler_perf did not produce is NaN.
type Run struct {
	IndexEntry
	Throughput        Quantiles // pods/s
	SnapshotDelayMs   Quantiles
	PeakHeapMB        float64
	PreFilterMs       Quantiles // the DRA plugin's PreFilter, sampled
	FilterMs          Quantiles // the DRA plugin's Filter, sampled
	SchedulingAttempt Quantiles // ms, scheduled attempts
	// SchedulingAlgorithm is the scheduling cycle's algorithm (PreFilter,
	// Filter, Score), every attempt; ms.
	SchedulingAlgorithm Quantiles
	// SLIMs is the pod scheduling SLI (first enqueue to scheduled, the
	// scheduler's scheduler_pod_scheduling_sli_duration_seconds) of the
	// pods scheduled while measuring; ms.
	SLIMs Quantiles
	// Attempts are the scheduling attempts each of those pods took
	// (scheduler_pod_scheduling_attempts).
	Attempts Quantiles
	// CPU is read from the CPU profile; zero without one.
	CPU CPU
	// Heap is read from the heap profile; zero without one.
	Heap Heap
}

// Quantiles are a histogram's or sample's summary.
type Quantiles struct {
	Average, P50, P90, P99 float64
}

var missing = Quantiles{math.NaN(), math.NaN(), math.NaN(), math.NaN()}

// Load reads the index of each of dirs and the result files it names, so
// that runs made by several commands (one workload set each, into
// directories of their own) make one table; an argument that ends in .json
// is a summary file (WriteSummary) and gives its runs. A workload's variant and pair
// found in two directories is an error: the table would pick one of them
// silently.
func Load(dirs ...string) ([]Run, error) {
	var runs []Run
	// from is the argument each run came from: within one directory the
	// index is what the harness wrote, as before.
	from := map[string]int{}
	for i, dir := range dirs {
		load := loadDir
		if isSummary(dir) {
			load = loadSummary
		}
		loaded, err := load(dir)
		if err != nil {
			return nil, err
		}
		for _, run := range loaded {
			key := fmt.Sprintf("%s/%s %s pair %d", run.TestCase, run.Workload, run.Variant, max(run.Pair, 1))
			if earlier, ok := from[key]; ok && earlier != i {
				return nil, fmt.Errorf("%s ran in %s and in %s: give each run's directory once", key, dirs[earlier], dir)
			}
			from[key] = i
		}
		runs = append(runs, loaded...)
	}
	return runs, nil
}

// loadDir reads dir's index and the result files it names.
func loadDir(dir string) ([]Run, error) {
	f, err := os.Open(filepath.Join(dir, IndexFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []Run
	scanner := bufio.NewScanner(f)
	for line := 1; scanner.Scan(); line++ {
		var e IndexEntry
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", IndexFile, line, err)
		}
		run := Run{IndexEntry: e, Throughput: missing, SnapshotDelayMs: missing, PeakHeapMB: math.NaN(),
			PreFilterMs: missing, FilterMs: missing, SchedulingAttempt: missing, SchedulingAlgorithm: missing, SLIMs: missing, Attempts: missing}
		if e.ResultFile != "" {
			if err := run.readResult(filepath.Join(dir, e.ResultFile)); err != nil {
				return nil, err
			}
		}
		if e.CPUProfile != "" {
			cpu, err := ReadCPUProfile(filepath.Join(dir, e.CPUProfile))
			if err != nil {
				return nil, err
			}
			run.CPU = cpu
		}
		if e.HeapProfile != "" {
			heap, err := ReadHeapProfile(filepath.Join(dir, e.HeapProfile))
			if err != nil {
				return nil, err
			}
			run.Heap = heap
		}
		runs = append(runs, run)
	}
	return runs, scanner.Err()
}

func (r *Run) readResult(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var items dataItems
	if err := json.Unmarshal(data, &items); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	plugin := "DRAScope"
	if r.Variant == Upstream || r.Variant == UpstreamPreQueueingHints {
		plugin = "DynamicResources"
	}
	for _, item := range items.DataItems {
		l := item.Labels
		switch {
		case l["Metric"] == "SchedulingThroughput":
			r.Throughput = quantiles(item.Data)
		case l["Metric"] == "drascope_resourcepool_snapshot_delay_seconds":
			r.SnapshotDelayMs = quantiles(item.Data)
		case l["Metric"] == "heap_memory_usage":
			r.PeakHeapMB = item.Data["Max"]
		case l["Metric"] == "scheduler_plugin_execution_duration_seconds" && l["plugin"] == plugin && l["extension_point"] == "PreFilter":
			r.PreFilterMs = quantiles(item.Data)
		case l["Metric"] == "scheduler_plugin_execution_duration_seconds" && l["plugin"] == plugin && l["extension_point"] == "Filter":
			r.FilterMs = quantiles(item.Data)
		case l["Metric"] == "scheduler_scheduling_attempt_duration_seconds" && l["result"] == "scheduled":
			r.SchedulingAttempt = quantiles(item.Data)
		case l["Metric"] == "scheduler_scheduling_algorithm_duration_seconds":
			r.SchedulingAlgorithm = quantiles(item.Data)
		case l["Metric"] == "scheduler_pod_scheduling_sli_duration_seconds":
			r.SLIMs = quantiles(item.Data)
		case l["Metric"] == "scheduler_pod_scheduling_attempts":
			// scheduler_perf scales every histogram from seconds to ms.
			q := quantiles(item.Data)
			r.Attempts = Quantiles{q.Average / 1000, q.P50 / 1000, q.P90 / 1000, q.P99 / 1000}
		}
	}
	return nil
}

func quantiles(data map[string]float64) Quantiles {
	get := func(k string) float64 {
		if v, ok := data[k]; ok {
			return v
		}
		return math.NaN()
	}
	return Quantiles{Average: get("Average"), P50: get("Perc50"), P90: get("Perc90"), P99: get("Perc99")}
}

// Row compares the two variants on one workload.
type Row struct {
	Workload string
	// Upstream and DRAScope are the median pair's runs: the only pair when
	// the workload ran once per variant, else the pair whose ratio is the
	// median (the lower middle one for an even number of pairs).
	Upstream, DRAScope Run
	// Ratio is the median pair's DRAScope average throughput over
	// upstream's.
	Ratio float64
	// DRAScopeFirst tells which variant ran first in the median pair.
	DRAScopeFirst bool
	// Ratios are every pair's ratios, lowest first.
	Ratios []float64
	// GeoMean is the geometric mean of Ratios (NaN if one is not a
	// number). Over an even number of pairs the harness runs each
	// scheduler first as often as second (RunOrder), and the median pair
	// of an even number is the lower middle one, likely one with DRAScope
	// first; the mean weighs both orders alike.
	GeoMean float64
	// SLIP50Ratios and SLIP99Ratios are every pair's DRAScope SLI p50
	// (p99) over upstream's, lowest first; empty where no pair measured
	// the SLI.
	SLIP50Ratios, SLIP99Ratios []float64
}

// Compare pairs the runs of each workload, in the order they ran. Pairs that
// lack a variant are reported as an error, listed after the rows, unless
// -perf-variants left it out.
func Compare(runs []Run) ([]Row, error) {
	type pair struct {
		upstream, drascope *Run
		// chosen are the variants -perf-variants chose; nil: all.
		chosen []string
	}
	type workload struct {
		order int
		pairs map[int]*pair
	}
	workloads := map[string]*workload{}
	for i := range runs {
		r := &runs[i]
		key := r.TestCase + "/" + r.Workload
		if r.Variant == UpstreamPreQueueingHints || r.Variant == DRAScopePreQueueingHints {
			key += PreQueueingHintsRow
		}
		w, ok := workloads[key]
		if !ok {
			w = &workload{order: len(workloads), pairs: map[int]*pair{}}
			workloads[key] = w
		}
		n := max(r.Pair, 1)
		if w.pairs[n] == nil {
			w.pairs[n] = &pair{}
		}
		w.pairs[n].chosen = r.Variants
		switch r.Variant {
		case Upstream, UpstreamPreQueueingHints:
			w.pairs[n].upstream = r
		case DRAScope, DRAScopePreQueueingHints:
			w.pairs[n].drascope = r
		}
	}
	var rows []Row
	var errs []error
	for key, w := range workloads {
		var complete []Row
		for n, p := range w.pairs {
			if p.upstream == nil || p.drascope == nil {
				if p.chosen != nil && !(slices.Contains(p.chosen, Upstream) && slices.Contains(p.chosen, DRAScope)) {
					// -perf-variants left one out: nothing to compare.
					continue
				}
				name := key
				if len(w.pairs) > 1 {
					name = fmt.Sprintf("%s pair %d", key, n)
				}
				errs = append(errs, fmt.Errorf("%s: ran with only one variant", name))
				continue
			}
			complete = append(complete, Row{
				Workload:      key,
				Upstream:      *p.upstream,
				DRAScope:      *p.drascope,
				Ratio:         p.drascope.Throughput.Average / p.upstream.Throughput.Average,
				DRAScopeFirst: p.drascope.Position < p.upstream.Position,
			})
		}
		if len(complete) == 0 {
			continue
		}
		// By ratio, NaN ones (no throughput measured) first; equal ratios,
		// NaN ones too, by pair rather than in the map's order, so that the
		// median pair of a row without figures is the same from one report
		// to the next.
		slices.SortFunc(complete, func(a, b Row) int {
			if c := cmp.Compare(a.Ratio, b.Ratio); c != 0 {
				return c
			}
			return cmp.Compare(a.Upstream.Pair, b.Upstream.Pair)
		})
		row := complete[(len(complete)-1)/2]
		for _, c := range complete {
			row.Ratios = append(row.Ratios, c.Ratio)
			if p50 := c.DRAScope.SLIMs.P50 / c.Upstream.SLIMs.P50; !math.IsNaN(p50) {
				row.SLIP50Ratios = append(row.SLIP50Ratios, p50)
				row.SLIP99Ratios = append(row.SLIP99Ratios, c.DRAScope.SLIMs.P99/c.Upstream.SLIMs.P99)
			}
		}
		row.GeoMean = geoMean(row.Ratios)
		slices.Sort(row.SLIP50Ratios)
		slices.Sort(row.SLIP99Ratios)
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return workloads[rows[i].Workload].order < workloads[rows[j].Workload].order })
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return rows, errors.Join(errs...)
}

// WriteMarkdown prints the rows as the tables of docs/perf.md:
// throughput, latency and cost, and the SLI where a row measured it. A workload run in several pairs shows its
// median pair, and the range and geometric mean of the ratios beside the
// median. Without rows (-perf-variants left upstream out) it prints
// nothing.
func WriteMarkdown(w io.Writer, rows []Row) error {
	for i, write := range []func(io.Writer, []Row) error{writeThroughput, writeLatency, writeCost, writeSLI} {
		if i > 0 && len(rows) > 0 && (i < 3 || slices.ContainsFunc(rows, func(r Row) bool { return len(r.SLIP50Ratios) > 0 })) {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if err := write(w, rows); err != nil {
			return err
		}
	}
	return nil
}

// writeThroughput prints the throughput of each row's median pair, the
// ratio and which scheduler ran first.
func writeThroughput(w io.Writer, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("| Workload | Upstream pods/s avg (p50/p90) | DRAScope pods/s avg (p50/p90) | DRAScope/upstream | First |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, r := range rows {
		first := Upstream
		if r.DRAScopeFirst {
			first = DRAScope
		}
		ratio := num(r.Ratio, 3)
		if len(r.Ratios) > 1 {
			ratio = fmt.Sprintf("%s (%d pairs: %s–%s; geometric mean %s)", ratio, len(r.Ratios), num(r.Ratios[0], 3), num(r.Ratios[len(r.Ratios)-1], 3), num(r.GeoMean, 3))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Workload,
			throughput(r.Upstream.Throughput), throughput(r.DRAScope.Throughput), ratio, first)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLatency prints the scheduler's latencies, peak heap and Unhealthy
// devices handed out, for each row's median pair.
func writeLatency(w io.Writer, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("| Workload | Scheduling algorithm p50/p99 ms (upstream; DRAScope) | Scheduling attempt p50/p99 ms, scheduled (upstream; DRAScope) | DRA plugin PreFilter p50/p99 ms (upstream; DRAScope) | Filter p50/p99 ms (upstream; DRAScope) | Peak heap MB (upstream; DRAScope) | Unhealthy devices allocated (upstream; DRAScope) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s; %s | %s; %s | %s; %s | %s; %s | %s; %s | %d; %d |\n", r.Workload,
			p50p99(r.Upstream.SchedulingAlgorithm), p50p99(r.DRAScope.SchedulingAlgorithm),
			p50p99(r.Upstream.SchedulingAttempt), p50p99(r.DRAScope.SchedulingAttempt),
			p50p99(r.Upstream.PreFilterMs), p50p99(r.DRAScope.PreFilterMs),
			p50p99(r.Upstream.FilterMs), p50p99(r.DRAScope.FilterMs),
			num(r.Upstream.PeakHeapMB, 0), num(r.DRAScope.PeakHeapMB, 0),
			r.Upstream.UnhealthyAllocated, r.DRAScope.UnhealthyAllocated)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSLI prints, for the rows that measured it, the pod scheduling SLI
// of each row's median pair in seconds, every pair's DRAScope/upstream
// ratio of its p50 and p99 (range and geometric mean beside the median
// pair's), and the attempts per scheduled pod.
func writeSLI(w io.Writer, rows []Row) error {
	rows = slices.DeleteFunc(slices.Clone(rows), func(r Row) bool { return len(r.SLIP50Ratios) == 0 })
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("| Workload | Pod scheduling SLI p50/p90/p99 s (upstream; DRAScope) | DRAScope/upstream SLI p50 | DRAScope/upstream SLI p99 | Attempts per scheduled pod, avg (upstream; DRAScope) |\n")
	b.WriteString("|---|---|---|---|---|\n")
	seconds := func(q Quantiles) string {
		return fmt.Sprintf("%s/%s/%s", num(q.P50/1000, 3), num(q.P90/1000, 3), num(q.P99/1000, 3))
	}
	ratios := func(median float64, all []float64) string {
		out := num(median, 3)
		if len(all) > 1 {
			out = fmt.Sprintf("%s (%d pairs: %s–%s; geometric mean %s)", out, len(all), num(all[0], 3), num(all[len(all)-1], 3), num(geoMean(all), 3))
		}
		return out
	}
	for _, r := range rows {
		u, d := r.Upstream, r.DRAScope
		fmt.Fprintf(&b, "| %s | %s; %s | %s | %s | %s; %s |\n", r.Workload, seconds(u.SLIMs), seconds(d.SLIMs),
			ratios(d.SLIMs.P50/u.SLIMs.P50, r.SLIP50Ratios), ratios(d.SLIMs.P99/u.SLIMs.P99, r.SLIP99Ratios),
			num(u.Attempts.Average, 2), num(d.Attempts.Average, 2))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// geoMean is the geometric mean of values.
func geoMean(values []float64) float64 {
	logSum := 0.0
	for _, v := range values {
		logSum += math.Log(v)
	}
	return math.Exp(logSum / float64(len(values)))
}

// writeCost prints the CPU per pod of each row's median pair, and what
// DRAScope's publishing wrote and how fresh it kept the ResourcePools.
func writeCost(w io.Writer, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("| Workload | Scheduler CPU ms per pod (upstream; DRAScope) | Process CPU ms per pod (upstream; DRAScope) | Snapshot delay p50/p99 ms | ResourcePool writes (due; in window) | Publish delay p95 (writes): run; window | Catch-up s |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		d := r.DRAScope
		fmt.Fprintf(&b, "| %s | %s; %s | %s; %s | %s | %s | %s | %s |\n", r.Workload,
			num(r.Upstream.SchedulerCPUPerPod(), 2), num(d.SchedulerCPUPerPod(), 2),
			num(r.Upstream.ProcessCPUPerPod(), 2), num(d.ProcessCPUPerPod(), 2),
			p50p99(d.SnapshotDelayMs), writesCell(d),
			publishDelay(d), num(d.CatchUpSeconds, 1))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Pruning counts a run's node-pruning answers by kind (nodeprune.Outcome),
// and its filter memo's answers (drascope_filter_memo_total).
type Pruning struct {
	Everywhere int `json:"everywhere"`
	Indexed    int `json:"indexed"`
	Fallback   int `json:"fallback"`
	// MemoAccepted, MemoRan and MemoRefuted are Filter calls the memo
	// answered, those upstream's Filter answered in its cycles, and the
	// memo's acceptances Reserve found wrong.
	MemoAccepted int `json:"memoAccepted,omitempty"`
	MemoRan      int `json:"memoRan,omitempty"`
	MemoRefuted  int `json:"memoRefuted,omitempty"`
}

// WritePruning prints, for every DRAScope run that pruned, how the
// availability index answered (every node qualified, pruned from the
// index, or fell back to the pass over every slice) and how its Filter
// calls were answered in the cycles the filter memo served.
func WritePruning(w io.Writer, runs []Run) error {
	selected := runsWhere(runs, func(r Run) bool { return r.Pruning != nil && *r.Pruning != Pruning{} })
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | node pruning: everywhere | indexed | fallback (share of indexed and fallback) | Filter: memo accepted (share) | upstream ran | memo refuted |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range selected {
		p := r.Pruning
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %d | %d | %d (%s) | %d (%s) | %d | %d |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant, p.Everywhere, p.Indexed, p.Fallback, share(p.Fallback, p.Indexed+p.Fallback),
			p.MemoAccepted, share(p.MemoAccepted, p.MemoAccepted+p.MemoRan), p.MemoRan, p.MemoRefuted)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writesCell prints a run's ResourcePool writes: all, then those that were
// due and those inside the measured window (with its length).
func writesCell(r Run) string {
	if r.WindowSeconds == 0 {
		return fmt.Sprintf("%d (%d; –)", r.ResourcePoolWrites, r.DueWrites)
	}
	return fmt.Sprintf("%d (%d; %d in %s s)", r.ResourcePoolWrites, r.DueWrites, r.WindowWrites, num(r.WindowSeconds, 1))
}

// floorCell prints a run's write floor, over the run and in the window;
// unknown for a run without writes or recorded before the floor was.
func floorCell(r Run) string {
	if r.ResourcePoolWrites == 0 || r.WriteFloor == 0 {
		return "–"
	}
	return fmt.Sprintf("%d (%d)", r.WriteFloor, r.WindowWriteFloor)
}

// windowCores prints the CPU the measured window cost the harness's process
// and etcd, per second of window; unknown for a run recorded before the
// harness measured it, and etcd's when the harness found no etcd child.
func windowCores(r Run) string {
	if r.WindowSeconds == 0 || r.WindowProcessCPU == 0 {
		return "–"
	}
	etcd := "–" // no etcd child: one started outside the harness
	if r.WindowEtcdCPU > 0 {
		etcd = num(r.WindowEtcdCPU/r.WindowSeconds, 2)
	}
	return num(r.WindowProcessCPU/r.WindowSeconds, 2) + "; " + etcd
}

// publishDelay prints the bound of the publish delay's p95 over the run,
// and inside the measured window where that was measured.
func publishDelay(r Run) string {
	cell := delayBound(r.PublishDelays, r.PublishDelayP95)
	if r.WindowPublishDelays > 0 {
		cell += "; window " + delayBound(r.WindowPublishDelays, r.WindowPublishDelayP95)
	}
	return cell
}

// publishDelayP99 prints the bound of the publish delay's p99 over the
// run, and inside the measured window where that was measured.
func publishDelayP99(r Run) string {
	cell := boundOnly(r.PublishDelays, r.PublishDelayP99)
	if r.WindowPublishDelays > 0 {
		cell += "; " + boundOnly(r.WindowPublishDelays, r.WindowPublishDelayP99)
	}
	return cell
}

// firstPublicationCell prints the first publications' p95 and count, and
// when the last pool was published.
func firstPublicationCell(r Run) string {
	cell := delayBound(r.FirstPublications, r.FirstPublishDelayP95)
	if r.FirstPublications > 0 && r.FirstPublicationSeconds > 0 {
		cell += fmt.Sprintf("; %s s", num(r.FirstPublicationSeconds, 0))
	}
	return cell
}

// delayBound prints a delay histogram's p95 bound (negative: beyond the
// last bucket) and its count.
func delayBound(count int, p95 float64) string {
	if count == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%d)", boundOnly(count, p95), count)
}

// boundOnly prints a quantile's bound without the count; a run recorded
// before the quantile was (zero) prints as unknown.
func boundOnly(count int, bound float64) string {
	switch {
	case count == 0 || bound == 0:
		return "–"
	case bound < 0:
		return fmt.Sprintf("> %s s", num(-bound, 3))
	}
	return fmt.Sprintf("≤ %s s", num(bound, 3))
}

func throughput(q Quantiles) string {
	return fmt.Sprintf("%s (%s/%s)", num(q.Average, 1), num(q.P50, 0), num(q.P90, 0))
}

func p50p99(q Quantiles) string {
	return num(q.P50, 3) + "/" + num(q.P99, 3)
}

func num(v float64, decimals int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.*f", decimals, v)
}

// runsWhere returns the runs keep selects, by workload, pair, and variant
// (upstream first).
func runsWhere(runs []Run, keep func(Run) bool) []Run {
	order := map[string]int{Upstream: 0, DRAScope: 1, DRAScopeMostAllocated: 2, DRAScopeLeastAllocated: 3, UpstreamPreQueueingHints: 4, DRAScopePreQueueingHints: 5, DRAScopeNoPublish: 6, DRAScopeBestFit: 7}
	var selected []Run
	for _, r := range runs {
		if keep(r) {
			selected = append(selected, r)
		}
	}
	sort.SliceStable(selected, func(i, j int) bool {
		a, b := selected[i], selected[j]
		if a.TestCase+"/"+a.Workload != b.TestCase+"/"+b.Workload {
			return a.TestCase+"/"+a.Workload < b.TestCase+"/"+b.Workload
		}
		if a.Pair != b.Pair {
			return a.Pair < b.Pair
		}
		return order[a.Variant] < order[b.Variant]
	})
	return selected
}

// WriteFragmentation prints, for every workload that created 8-GPU pods
// (the Fragmentation test case), each variant's run: how many of them were
// placed, and the throughput of the 1-GPU pods before them. With several
// pairs, every run is listed.
func WriteFragmentation(w io.Writer, runs []Run) error {
	selected := runsWhere(runs, func(r Run) bool { return r.BigPods > 0 })
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | 8-GPU pods placed | 1-GPU pods/s avg (p50/p90) |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, r := range selected {
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %d of %d | %s |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant, r.BigPodsPlaced, r.BigPods, throughput(r.Throughput))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteDeviceChoice prints, for every workload that also ran DRAScope with
// deviceChoice BestFit, each run: its throughput, and for the device-choice
// test cases the whole-GPU pods placed against the offline optimum
// (partitions) or the 2-GPU pods whose GPUs share a PCIe root (topology).
// With several pairs, every run is listed.
func WriteDeviceChoice(w io.Writer, runs []Run) error {
	compared := map[string]bool{}
	for _, r := range runs {
		if r.Variant == DRAScopeBestFit || r.WholePods > 0 || r.PairPods > 0 {
			compared[r.TestCase+"/"+r.Workload] = true
		}
	}
	selected := runsWhere(runs, func(r Run) bool {
		return compared[r.TestCase+"/"+r.Workload] && (r.Variant == Upstream || r.Variant == DRAScope || r.Variant == DRAScopeBestFit)
	})
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | pods/s avg (p50/p90) | whole GPUs placed (of optimum; pods) | 2-GPU pods on one PCIe root (of placed; pods) |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range selected {
		whole, pairs := "–", "–"
		if r.WholePods > 0 {
			whole = fmt.Sprintf("%d (%s of %d; %d)", r.WholePodsPlaced, share(r.WholePodsPlaced, r.WholePodsOptimum), r.WholePodsOptimum, r.WholePods)
		}
		if r.PairPods > 0 {
			pairs = fmt.Sprintf("%d (%s of %d; %d)", r.PairsOneRoot, share(r.PairsOneRoot, r.PairPodsPlaced), r.PairPodsPlaced, r.PairPods)
		}
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %s | %s | %s |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant, throughput(r.Throughput), whole, pairs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// share prints part/whole as a percentage; – without a whole.
func share(part, whole int) string {
	if whole == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}

// WritePreemption prints, for every workload that created urgent pods (the
// PreemptionOnFullCluster test case), each run: how many of them were
// placed, how many pods were preempted for them, and how long placing them
// took.
func WritePreemption(w io.Writer, runs []Run) error {
	selected := runsWhere(runs, func(r Run) bool { return r.UrgentPods > 0 })
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | urgent pods placed | pods preempted | last placed after |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range selected {
		after := "–"
		if r.UrgentPodsPlaced > 0 {
			after = fmt.Sprintf("%.0f s", r.UrgentSeconds)
		}
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %d of %d | %d | %s |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant, r.UrgentPodsPlaced, r.UrgentPods, r.Victims, after)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteGangs prints, for every workload that created gangs (the Gangs
// test case), each run: the gangs placed whole, their members bound, the
// partial gangs, the time until the last member was bound, and the
// throughput of the small jobs before them.
func WriteGangs(w io.Writer, runs []Run) error {
	selected := runsWhere(runs, func(r Run) bool { return r.Gangs > 0 })
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | gangs placed | members placed | partial gangs | last member bound after | small jobs/s avg (p50/p90) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range selected {
		after := "–"
		if r.GangMembersPlaced > 0 {
			after = fmt.Sprintf("%.0f s", r.GangSeconds)
		}
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %d of %d | %d | %d | %s | %s |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant, r.GangsPlaced, r.Gangs, r.GangMembersPlaced, r.PartialGangs, after, throughput(r.Throughput))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePublishing prints, for every workload that also ran DRAScope with
// publishing off, each run of DRAScope with and without publishing and of
// upstream: the throughput, the CPU the measured window cost the harness's
// process and etcd (in cores: seconds per second of window), and what
// publishing wrote and how fresh it kept the ResourcePools. With several
// pairs, every run is listed.
func WritePublishing(w io.Writer, runs []Run) error {
	compared := map[string]bool{}
	for _, r := range runs {
		if r.Variant == DRAScopeNoPublish {
			compared[r.TestCase+"/"+r.Workload] = true
		}
	}
	selected := runsWhere(runs, func(r Run) bool {
		return compared[r.TestCase+"/"+r.Workload] && (r.Variant == DRAScope || r.Variant == DRAScopeNoPublish || r.Variant == Upstream)
	})
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | pods/s avg (p50/p90) | Window cores: process; etcd | ResourcePool writes (due; in window) | Write floor (in window) | Publish delay p95 (writes): run; window | p99: run; window | First publication p95 (pools); all by |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range selected {
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant, throughput(r.Throughput), windowCores(r), writesCell(r), floorCell(r),
			publishDelay(r), publishDelayP99(r), firstPublicationCell(r))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
