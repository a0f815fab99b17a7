// Command report prints the side-by-side table of a test/perf run:
//
//	go run ./test/perf/report _output/perf/run
//	go run ./test/perf/report _output/perf-a/performance _output/perf-b/performance
//
// It exits 1 when a workload ran with only one of the two schedulers.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/drascope/drascope/test/perf/results"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s DATA-ITEMS-DIR...\n\nPrints the upstream vs DRAScope table of a test/perf run (make perf, make perf-smoke)\nfrom the scheduler_perf result files and the harness's index in DATA-ITEMS-DIR.\nSeveral directories (runs of different workloads, each with its own PERF_OUT)\nmake one table.\n", os.Args[0])
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	runs, err := results.Load(flag.Args()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	rows, compareErr := results.Compare(runs)
	if err := results.WriteMarkdown(os.Stdout, rows); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	for _, write := range []func(io.Writer, []results.Run) error{
		results.WriteFragmentation, results.WriteDeviceChoice, results.WritePreemption, results.WriteGangs, results.WritePublishing, results.WritePruning,
	} {
		if err := write(os.Stdout, runs); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
	if compareErr != nil {
		fmt.Fprintln(os.Stderr, "report:", compareErr)
		os.Exit(1)
	}
}
