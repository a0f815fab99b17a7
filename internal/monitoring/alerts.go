package monitoring

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape reads a drascope-scheduler's /metrics on 127.0.0.1:port with a
// bearer token the scheduler's delegated authorization lets read it. The
// serving certificate is the scheduler's self-signed one, so it is not
// verified: use it on loopback only.
func Scrape(ctx context.Context, port int, token string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, the scheduler's self-signed certificate
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping /metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	return families, nil
}

// Series is one sample of a gauge.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

func (s Series) String() string {
	pairs := make([]string, 0, len(s.Labels))
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	return s.Name + "{" + strings.Join(pairs, ",") + "}"
}

// DrascopeGauges are the samples of drascope's gauges (the ones the alerts
// read) whose labels keep accepts.
func DrascopeGauges(families map[string]*dto.MetricFamily, keep func(labels map[string]string) bool) []Series {
	var series []Series
	for _, name := range slices.Sorted(maps.Keys(families)) {
		family := families[name]
		if !strings.HasPrefix(name, "drascope_") || family.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range family.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if keep(labels) {
				series = append(series, Series{Name: name, Labels: labels, Value: m.GetGauge().GetValue()})
			}
		}
	}
	return series
}

// Alert is a firing alert: its name and the labels the rule gives it.
type Alert struct {
	Name   string
	Labels map[string]string
}

func (a Alert) String() string {
	return Series{Name: a.Name, Labels: a.Labels}.String()
}

// EvalMinutes is when CheckAlerts looks at which alerts fire: longer than
// any alert's "for" in rules.yaml (a test checks it), so that an alert whose
// expression holds has fired by then.
const EvalMinutes = 20

// CheckAlerts runs the rules over the series, each held at its value, with
// drascope-alerts (hack/prometheus/cmd/drascope-alerts: promtool test rules'
// evaluation, without promtool's service discovery), and wants exactly the
// alerts want firing after EvalMinutes, no more and no fewer. The error
// names what fired instead.
func CheckAlerts(ctx context.Context, evaluator string, rules []byte, series []Series, want []Alert) error {
	dir, err := os.MkdirTemp("", "drascope-alerts-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o600); err != nil {
		return err
	}
	input := make([]map[string]string, 0, len(series))
	for _, s := range series {
		input = append(input, map[string]string{"series": s.String(), "values": fmt.Sprintf("%gx%d", s.Value, EvalMinutes+1)})
	}
	seriesJSON, err := json.Marshal(input)
	if err != nil {
		return err
	}
	seriesFile := filepath.Join(dir, "series.json")
	if err := os.WriteFile(seriesFile, seriesJSON, 0o600); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, evaluator, "--rules", rulesFile, "--series", seriesFile, "--interval", "1m", "--at", fmt.Sprintf("%dm", EvalMinutes))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(evaluator), err, strings.TrimSpace(stderr.String()))
	}
	var firing []map[string]string
	if err := json.Unmarshal(out, &firing); err != nil {
		return fmt.Errorf("%s printed %q: %w", filepath.Base(evaluator), out, err)
	}
	got := make([]string, 0, len(firing))
	for _, labels := range firing {
		name := labels["alertname"]
		delete(labels, "alertname")
		got = append(got, Alert{Name: name, Labels: labels}.String())
	}
	expected := make([]string, 0, len(want))
	for _, a := range want {
		expected = append(expected, a.String())
	}
	slices.Sort(got)
	slices.Sort(expected)
	if !slices.Equal(got, expected) {
		return fmt.Errorf("after %d minutes of these series the alerts that fire are %v, not %v", EvalMinutes, got, expected)
	}
	return nil
}
