// Command drascope-alerts prints, as JSON, the alerts that fire when a
// Prometheus rule file is evaluated over series held in a JSON file, the way
// promtool test rules evaluates them. The sandbox's alert step runs it; it
// builds without promtool's service-discovery tree.
//
//	drascope-alerts --rules rules.yaml --series series.json --at 20m
//
// series.json is a list of {"series": "name{label=\"v\"}", "values": "1x20"}
// in promtool's input_series notation.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/drascope/drascope/hack/prometheus/alerteval"
)

func main() {
	rulesFile := flag.String("rules", "", "Prometheus rule file to evaluate.")
	seriesFile := flag.String("series", "", "JSON list of input series in promtool's notation ({\"series\": ..., \"values\": ...}).")
	interval := flag.Duration("interval", time.Minute, "Sample and evaluation interval.")
	at := flag.Duration("at", 20*time.Minute, "Evaluation time whose firing alerts are printed.")
	flag.Parse()
	if *rulesFile == "" || *seriesFile == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: drascope-alerts --rules FILE --series FILE [--interval 1m] [--at 20m]")
		os.Exit(2)
	}
	if err := run(*rulesFile, *seriesFile, *interval, *at); err != nil {
		fmt.Fprintln(os.Stderr, "drascope-alerts:", err)
		os.Exit(1)
	}
}

func run(rulesFile, seriesFile string, interval, at time.Duration) error {
	content, err := os.ReadFile(seriesFile)
	if err != nil {
		return err
	}
	var series []alerteval.Series
	if err := json.Unmarshal(content, &series); err != nil {
		return fmt.Errorf("%s: %w", seriesFile, err)
	}
	firing, err := alerteval.Firing(context.Background(), rulesFile, series, interval, at)
	if err != nil {
		return err
	}
	if firing == nil {
		firing = []alerteval.Alert{}
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	return out.Encode(firing)
}
