package alerteval

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

const (
	rulesFile = "../../../manifests/monitoring/rules.yaml"
	testsFile = "../../../manifests/monitoring/tests/rules_test.yaml"
)

// promtoolTests is the part of promtool's test file format that the shipped
// rules_test.yaml uses for alerts.
type promtoolTests struct {
	Tests []struct {
		Interval       model.Duration `json:"interval"`
		InputSeries    []Series       `json:"input_series"`
		AlertRuleTests []struct {
			EvalTime  model.Duration `json:"eval_time"`
			Alertname string         `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `json:"exp_labels"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestFiringAgreesWithPromtoolTests evaluates every alert case of
// manifests/monitoring/tests/rules_test.yaml, whose expectations make test
// runs through promtool test rules, and wants the same alerts: the sandbox's
// lighter evaluator and promtool tell the same story about the shipped rules.
func TestFiringAgreesWithPromtoolTests(t *testing.T) {
	content, err := os.ReadFile(testsFile)
	if err != nil {
		t.Fatal(err)
	}
	var file promtoolTests
	if err := yaml.Unmarshal(content, &file); err != nil {
		t.Fatal(err)
	}
	cases := 0
	for i, group := range file.Tests {
		for _, c := range group.AlertRuleTests {
			cases++
			firing, err := Firing(context.Background(), rulesFile, group.InputSeries, time.Duration(group.Interval), time.Duration(c.EvalTime))
			if err != nil {
				t.Fatalf("test group %d at %v: %v", i, c.EvalTime, err)
			}
			var got, want []string
			for _, a := range firing {
				if a["alertname"] == c.Alertname {
					got = append(got, a.String())
				}
			}
			for _, e := range c.ExpAlerts {
				labels := maps.Clone(e.ExpLabels)
				if labels == nil {
					labels = map[string]string{}
				}
				labels["alertname"] = c.Alertname
				want = append(want, Alert(labels).String())
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("test group %d, %s at %v: firing %v, promtool's test expects %v", i, c.Alertname, c.EvalTime, got, want)
			}
		}
	}
	if cases < 10 {
		t.Fatalf("%s has %d alert cases; expected the shipped file's dozen", testsFile, cases)
	}
}

// TestFiringHoldsAlertsForTheirFor: a condition that has held for less than
// an alert's "for" fires nothing; held longer, it fires.
func TestFiringHoldsAlertsForTheirFor(t *testing.T) {
	series := []Series{
		{Series: `drascope_pending_pods{device_class="gpu"}`, Values: "1x30"},
		{Series: `drascope_device_class_available_devices{device_class="gpu"}`, Values: "0x30"},
	}
	early, err := Firing(context.Background(), rulesFile, series, time.Minute, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	late, err := Firing(context.Background(), rulesFile, series, time.Minute, 20*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(early) != 0 {
		t.Errorf("after 1m: %v fire; DRADeviceClassExhausted waits 5m", early)
	}
	if len(late) != 1 || !strings.HasPrefix(late[0].String(), "DRADeviceClassExhausted{") || late[0]["device_class"] != "gpu" {
		t.Errorf("after 20m: %v fire, want DRADeviceClassExhausted for gpu", late)
	}
}

func TestFiringReportsBadInput(t *testing.T) {
	if _, err := Firing(context.Background(), rulesFile, []Series{{Series: "up{", Values: "1x2"}}, time.Minute, time.Minute); err == nil {
		t.Error("a malformed series loaded without error")
	}
	if _, err := Firing(context.Background(), "no-such-rules.yaml", nil, time.Minute, time.Minute); err == nil {
		t.Error("a missing rule file loaded without error")
	}
}
