package monitoring

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	rulesFile          = "../../manifests/monitoring/rules.yaml"
	prometheusRuleFile = "../../manifests/monitoring/prometheusrule.yaml"
)

// prometheusRuleHeader wraps the rule file's groups for the Prometheus
// operator. The label is one a ruleSelector can pick; operators with
// another selector add theirs (docs/monitoring.md).
const prometheusRuleHeader = `# Generated from rules.yaml by ` + "`make generate`" + `; do not edit.
# kubectl apply -f manifests/monitoring/prometheusrule.yaml (Prometheus operator)
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: drascope-scheduler
  namespace: kube-system
  labels:
    app.kubernetes.io/name: drascope-scheduler
spec:
`

// prometheusRule is rules.yaml's groups, indented under spec: text, not
// re-marshalled, so that the expressions and descriptions read as written.
func prometheusRule(rules string) string {
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	inGroups := false
	for _, line := range strings.SplitAfter(rules, "\n") {
		if strings.HasPrefix(line, "groups:") {
			inGroups = true
		}
		if !inGroups || line == "" {
			continue
		}
		if line == "\n" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return b.String()
}

func TestPrometheusRuleIsCurrent(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := prometheusRule(string(rules))

	// The PrometheusRule's spec must be the rule file, whatever the text.
	var plain, wrapped map[string]any
	if err := yaml.Unmarshal(rules, &plain); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if err := yaml.Unmarshal([]byte(want), &wrapped); err != nil {
		t.Fatalf("generated PrometheusRule: %v", err)
	}
	if plain["groups"] == nil || !reflect.DeepEqual(wrapped["spec"], plain) {
		t.Fatalf("the generated PrometheusRule's spec is not the groups of %s:\n%s", rulesFile, want)
	}

	if *update {
		if err := os.WriteFile(prometheusRuleFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatalf("%v (run make generate)", err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run make generate", prometheusRuleFile)
	}
}

// CheckAlerts looks at the alerts after EvalMinutes: every alert's "for"
// must be shorter, or CheckAlerts could not see it fire.
func TestEveryAlertFiresWithinCheckAlertsWindow(t *testing.T) {
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string
				For   string
			}
		}
	}
	if err := yaml.Unmarshal(content, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, group := range rules.Groups {
		for _, rule := range group.Rules {
			if rule.Alert == "" {
				continue
			}
			alerts++
			if rule.For == "" {
				continue
			}
			d, err := time.ParseDuration(rule.For)
			if err != nil {
				t.Errorf("alert %s: for %q: %v", rule.Alert, rule.For, err)
				continue
			}
			if d >= EvalMinutes*time.Minute {
				t.Errorf("alert %s waits %s, not less than CheckAlerts' %d minutes: raise EvalMinutes", rule.Alert, d, EvalMinutes)
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
}
