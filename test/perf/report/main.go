// Command report prints the side-by-side tables of test/perf runs, from the
// directories the harness wrote or from committed summaries, and writes
// summaries:
//
//	go run ./test/perf/report _output/perf/performance
//	go run ./test/perf/report _output/perf-a/performance _output/perf-b/performance
//	go run ./test/perf/report -tables=throughput,sizing test/perf/summaries/scale.json
//	go run ./test/perf/report -summary test/perf/summaries/scale.json -command 'make perf-scale' _output/perf/scale
//	go run ./test/perf/report -workloads '_2000nodes$' test/perf/summaries/scale.json
//
// It exits 1 when a workload ran with only one of the two schedulers.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"

	"github.com/drascope/drascope/test/perf/results"
)

func main() {
	workloads := flag.String("workloads", "", "only the workloads whose TestCase/Workload name this regular expression matches (default all), in the tables and in a summary")
	tables := flag.String("tables", "", "comma-separated tables to print, of "+results.TableNames()+" (default all)")
	summary := flag.String("summary", "", "write a summary of the runs (the figures without the raw files) to this file instead of printing tables")
	command := flag.String("command", "", "with -summary: the command that made the runs, as a reader would type it again")
	commit := flag.String("commit", "", "with -summary: the commit the runs measured (default: git rev-parse --short HEAD)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: %s [flags] DATA-ITEMS-DIR|SUMMARY.json...

Prints the upstream vs DRAScope tables of test/perf runs (make perf, make
perf-smoke, make perf-scale) from the scheduler_perf result files and the
harness's index in each DATA-ITEMS-DIR, or from summary files. Several
arguments (runs of different workloads) make one set of tables. With
-summary it writes the runs' figures to a summary file, which docs/perf.md's
tables are printed from (make perf-docs).

`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var only *regexp.Regexp
	if *workloads != "" {
		var err error
		if only, err = regexp.Compile(*workloads); err != nil {
			fmt.Fprintln(os.Stderr, "report: -workloads:", err)
			os.Exit(2)
		}
	}
	if *summary != "" {
		if err := writeSummary(*summary, *command, *commit, only, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	var names []string
	if *tables != "" {
		names = strings.Split(*tables, ",")
	}
	if err := results.Render(os.Stdout, flag.Args(), names, only); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func writeSummary(path, command, commit string, only *regexp.Regexp, dirs []string) error {
	if command == "" {
		return fmt.Errorf("-summary needs -command: a summary says how its runs were made")
	}
	if commit == "" {
		out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
		if err != nil {
			return fmt.Errorf("-commit not given and git rev-parse failed: %w", err)
		}
		commit = strings.TrimSpace(string(out))
	}
	runs, err := results.Load(dirs...)
	if err != nil {
		return err
	}
	runs = results.Only(runs, only)
	if len(runs) == 0 {
		return fmt.Errorf("no run to summarize: -workloads left none")
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := results.WriteSummary(f, results.Summary{Machine: results.Machine(), Command: command, Commit: commit, Runs: runs}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
