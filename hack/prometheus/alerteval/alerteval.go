// Package alerteval tells which alerts fire when Prometheus rules are
// evaluated over given series, the way promtool test rules does: the same
// series loader (promqltest's LazyLoader), the same rule manager and PromQL
// engine, each group evaluated once per interval from time 0. It imports
// neither promtool nor Prometheus' service discovery, so a binary built on it
// compiles in a fraction of promtool's time: the sandbox's alert step uses
// it, and make test-monitoring still runs promtool itself.
package alerteval

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"sigs.k8s.io/yaml"
)

// Series is one input series in promtool's notation: a selector such as
// up{job="a"}, and values such as "1x20" or "0+1x10".
type Series struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// Alert is a firing alert's labels, alertname among them.
type Alert map[string]string

func (a Alert) String() string {
	pairs := make([]string, 0, len(a))
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if k != "alertname" {
			pairs = append(pairs, fmt.Sprintf("%s=%q", k, a[k]))
		}
	}
	return a["alertname"] + "{" + strings.Join(pairs, ",") + "}"
}

// Firing evaluates the rule file's groups over series, sampled every
// interval, at 0, interval, 2·interval, ... up to at, and returns the alerts
// firing after the last evaluation, sorted.
func Firing(ctx context.Context, ruleFile string, series []Series, interval, at time.Duration) ([]Alert, error) {
	if interval <= 0 || at < 0 {
		return nil, fmt.Errorf("interval %v and evaluation time %v: interval must be positive and the time not negative", interval, at)
	}
	var load strings.Builder
	fmt.Fprintf(&load, "load %dms\n", interval.Milliseconds())
	for _, s := range series {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	promqlParser := parser.NewParser(parser.Options{})
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               promqlParser,
	})
	if err != nil {
		return nil, fmt.Errorf("loading the series: %w", err)
	}
	defer func() { _ = suite.Close() }()
	suite.SubqueryInterval = interval

	manager := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      ctx,
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       slog.New(slog.DiscardHandler),
		Parser:       promqlParser,
	})
	loaded, errs := manager.LoadGroups(interval, labels.EmptyLabels(), "", nil, false, ruleFile)
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %w", ruleFile, errs[0])
	}
	groups, err := inFileOrder(ruleFile, loaded)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if alert, ok := r.(*rules.AlertingRule); ok {
				// As promtool does: an alert restored from nothing, so that
				// it may fire from the first evaluation on.
				alert.SetRestored(true)
			}
		}
	}

	var evalErr error
	for ts := time.Unix(0, 0).UTC(); ts.Sub(time.Unix(0, 0)) <= at && evalErr == nil; ts = ts.Add(interval) {
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErr = err
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if err := r.LastError(); err != nil && evalErr == nil {
						evalErr = fmt.Errorf("rule %s at %v: %w", r.Name(), ts.Sub(time.Unix(0, 0)), err)
					}
				}
			}
		})
	}
	if evalErr != nil {
		return nil, evalErr
	}

	var firing []Alert
	for _, g := range groups {
		for _, r := range g.Rules() {
			rule, ok := r.(*rules.AlertingRule)
			if !ok {
				continue
			}
			for _, a := range rule.ActiveAlerts() {
				if a.State == rules.StateFiring {
					firing = append(firing, Alert(a.Labels.Map()))
				}
			}
		}
	}
	slices.SortFunc(firing, func(a, b Alert) int { return strings.Compare(a.String(), b.String()) })
	return firing, nil
}

// inFileOrder returns the loaded groups in the order the file lists them:
// a group's recording rules feed the groups after it, as in promtool.
func inFileOrder(ruleFile string, loaded map[string]*rules.Group) ([]*rules.Group, error) {
	content, err := os.ReadFile(ruleFile)
	if err != nil {
		return nil, err
	}
	var parsed struct {
		Groups []struct {
			Name string `json:"name"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(content, &parsed); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", ruleFile, err)
	}
	var groups []*rules.Group
	for _, g := range parsed.Groups {
		for _, l := range loaded {
			if l.Name() == g.Name {
				groups = append(groups, l)
			}
		}
	}
	if len(groups) != len(loaded) {
		return nil, fmt.Errorf("%s: %d groups loaded, %d found in the file", ruleFile, len(loaded), len(groups))
	}
	return groups, nil
}
