package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// SummaryVersion is the version of the summary format Summary writes;
// ReadSummary refuses any other.
const SummaryVersion = 1

// A Summary is the figures of a set of runs without their raw files
// (scheduler_perf's JSON, the profiles): small enough to commit, so that
// the tables of docs/perf.md are printed from it by the same code that
// prints a fresh run's (Render).
type Summary struct {
	Version int `json:"version"`
	// Machine is where the runs ran (Machine's description).
	Machine string `json:"machine"`
	// Command is what made the runs, as a reader would type it again.
	Command string `json:"command"`
	// Commit is the repository's commit the runs measured.
	Commit string `json:"commit"`
	Runs   []Run  `json:"runs"`
}

// ReadSummary reads a summary file.
func ReadSummary(path string) (Summary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Summary{}, err
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return Summary{}, fmt.Errorf("%s: %w", path, err)
	}
	if s.Version != SummaryVersion {
		return Summary{}, fmt.Errorf("%s: summary version %d, want %d", path, s.Version, SummaryVersion)
	}
	return s, nil
}

// WriteSummary writes s, one run per line, so that a new measurement's
// diff reads run by run. The runs' file names are left out: a summary
// stands without them.
func WriteSummary(w io.Writer, s Summary) error {
	s.Version = SummaryVersion
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"version\": %d,\n", s.Version)
	for _, field := range []struct{ name, value string }{{"machine", s.Machine}, {"command", s.Command}, {"commit", s.Commit}} {
		v, err := json.Marshal(field.value)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, " %q: %s,\n", field.name, v)
	}
	b.WriteString(" \"runs\": [")
	for i, r := range s.Runs {
		r.ResultFile, r.CPUProfile, r.HeapProfile = "", "", ""
		data, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("%s/%s %s: %w", r.TestCase, r.Workload, r.Variant, err)
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		b.Write(data)
	}
	b.WriteString("\n ]}\n")
	_, err := w.Write(b.Bytes())
	return err
}

// Machine describes the machine this process runs on, as the docs name the
// machine a figure was measured on: CPU model and cores, memory, Go.
func Machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				model = strings.TrimSpace(value)
				break
			}
		}
	}
	memory := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		scanner := bufio.NewScanner(bytes.NewReader(data))
		for scanner.Scan() {
			var kB float64
			if _, err := fmt.Sscanf(scanner.Text(), "MemTotal: %f kB", &kB); err == nil {
				memory = fmt.Sprintf(", %.0f GiB", kB/(1<<20))
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s, %s/%s", runtime.NumCPU(), model, memory, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// figure is a float64 that a JSON null stands for when it is not a number:
// scheduler_perf leaves out what it did not measure, and Run says so with
// NaN, which JSON cannot hold.
type figure float64

func (f figure) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', -1, 64), nil
}

func (f *figure) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*f = figure(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(data), 64)
	*f = figure(v)
	return err
}

type quantilesJSON struct {
	Average figure `json:"avg"`
	P50     figure `json:"p50"`
	P90     figure `json:"p90"`
	P99     figure `json:"p99"`
}

func (q Quantiles) toJSON() quantilesJSON {
	return quantilesJSON{figure(q.Average), figure(q.P50), figure(q.P90), figure(q.P99)}
}

func (q quantilesJSON) quantiles() Quantiles {
	return Quantiles{float64(q.Average), float64(q.P50), float64(q.P90), float64(q.P99)}
}

// runJSON is Run as a summary holds it.
type runJSON struct {
	IndexEntry
	Throughput          quantilesJSON `json:"throughput"`
	SnapshotDelayMs     quantilesJSON `json:"snapshotDelayMs"`
	PeakHeapMB          figure        `json:"peakHeapMB"`
	PreFilterMs         quantilesJSON `json:"preFilterMs"`
	FilterMs            quantilesJSON `json:"filterMs"`
	SchedulingAttempt   quantilesJSON `json:"schedulingAttemptMs"`
	SchedulingAlgorithm quantilesJSON `json:"schedulingAlgorithmMs"`
	// Absent from summaries written before the report read them.
	SLIMs    *quantilesJSON `json:"sliMs,omitempty"`
	Attempts *quantilesJSON `json:"attempts,omitempty"`
	CPU      CPU            `json:"cpu"`
	Heap     Heap           `json:"heap"`
}

func (r Run) MarshalJSON() ([]byte, error) {
	return json.Marshal(runJSON{
		IndexEntry: r.IndexEntry, Throughput: r.Throughput.toJSON(), SnapshotDelayMs: r.SnapshotDelayMs.toJSON(),
		PeakHeapMB: figure(r.PeakHeapMB), PreFilterMs: r.PreFilterMs.toJSON(), FilterMs: r.FilterMs.toJSON(),
		SchedulingAttempt: r.SchedulingAttempt.toJSON(), SchedulingAlgorithm: r.SchedulingAlgorithm.toJSON(),
		SLIMs: measured(r.SLIMs), Attempts: measured(r.Attempts),
		CPU: r.CPU, Heap: r.Heap,
	})
}

// measured is q as a summary holds it; nil where nothing was measured.
func measured(q Quantiles) *quantilesJSON {
	if math.IsNaN(q.Average) && math.IsNaN(q.P50) {
		return nil
	}
	j := q.toJSON()
	return &j
}

// orMissing is what a summary holds, or missing where it holds nothing.
func orMissing(j *quantilesJSON) Quantiles {
	if j == nil {
		return missing
	}
	return j.quantiles()
}

func (r *Run) UnmarshalJSON(data []byte) error {
	var j runJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*r = Run{
		IndexEntry: j.IndexEntry, Throughput: j.Throughput.quantiles(), SnapshotDelayMs: j.SnapshotDelayMs.quantiles(),
		PeakHeapMB: float64(j.PeakHeapMB), PreFilterMs: j.PreFilterMs.quantiles(), FilterMs: j.FilterMs.quantiles(),
		SchedulingAttempt: j.SchedulingAttempt.quantiles(), SchedulingAlgorithm: j.SchedulingAlgorithm.quantiles(),
		SLIMs: orMissing(j.SLIMs), Attempts: orMissing(j.Attempts),
		CPU: j.CPU, Heap: j.Heap,
	}
	return nil
}

// A Table is one of the report's tables.
type Table struct {
	Name  string
	Write func(io.Writer, []Run) error
}

// Tables are the report's tables, in the order it prints them.
var Tables = []Table{
	{"throughput", compared(writeThroughput)},
	{"latency", compared(writeLatency)},
	{"cost", compared(writeCost)},
	{"sli", compared(writeSLI)},
	{"fragmentation", WriteFragmentation},
	{"devicechoice", WriteDeviceChoice},
	{"preemption", WritePreemption},
	{"gangs", WriteGangs},
	{"publishing", WritePublishing},
	{"pruning", WritePruning},
	{"sizing", WriteSizing},
}

// compared makes a table of the median pairs into a table of runs; pairs
// Compare could not complete are Render's to report.
func compared(write func(io.Writer, []Row) error) func(io.Writer, []Run) error {
	return func(w io.Writer, runs []Run) error {
		rows, _ := Compare(runs)
		return write(w, rows)
	}
}

// TableNames are the names Render takes, comma-separated.
func TableNames() string {
	var names []string
	for _, t := range Tables {
		names = append(names, t.Name)
	}
	return strings.Join(names, ",")
}

// Render prints the named tables (all for none) of the runs that paths
// hold, the directories of runs the harness wrote or summary files
// (.json), whose TestCase/Workload workloads matches (all for nil). For
// each summary it first says how and where its runs were made. Each table
// is one paragraph. It reports a workload that ran with only one of the two
// schedulers after printing the tables.
func Render(w io.Writer, paths []string, tables []string, workloads *regexp.Regexp) error {
	for _, name := range tables {
		if !slices.ContainsFunc(Tables, func(t Table) bool { return t.Name == name }) {
			return fmt.Errorf("unknown table %q (known: %s)", name, TableNames())
		}
	}
	runs, err := Load(paths...)
	if err != nil {
		return err
	}
	runs = Only(runs, workloads)
	var out []string
	for _, path := range paths {
		if !isSummary(path) {
			continue
		}
		s, err := ReadSummary(path)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("`%s` at %s, on %s:", s.Command, s.Commit, s.Machine))
	}
	for _, t := range Tables {
		if len(tables) > 0 && !slices.Contains(tables, t.Name) {
			continue
		}
		var b strings.Builder
		if err := t.Write(&b, runs); err != nil {
			return err
		}
		if table := strings.TrimSpace(b.String()); table != "" {
			out = append(out, table)
		}
	}
	if _, err := io.WriteString(w, strings.Join(out, "\n\n")+"\n"); err != nil {
		return err
	}
	_, compareErr := Compare(runs)
	return compareErr
}

// Only returns the runs whose TestCase/Workload workloads matches; all of
// them for nil.
func Only(runs []Run, workloads *regexp.Regexp) []Run {
	if workloads == nil {
		return runs
	}
	var kept []Run
	for _, r := range runs {
		if workloads.MatchString(r.TestCase + "/" + r.Workload) {
			kept = append(kept, r)
		}
	}
	return kept
}

func isSummary(path string) bool { return strings.HasSuffix(path, ".json") }

// loadSummary reads the runs of a summary file.
func loadSummary(path string) ([]Run, error) {
	s, err := ReadSummary(path)
	if err != nil {
		return nil, err
	}
	if len(s.Runs) == 0 {
		return nil, errors.New(path + ": a summary without runs")
	}
	return s.Runs, nil
}
