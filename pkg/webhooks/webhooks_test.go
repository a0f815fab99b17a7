package webhooks

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/utils/ptr"
)

var rulesPath = field.NewPath("excludeResourceRules")

func TestValidateRules(t *testing.T) {
	tests := map[string]struct {
		rules []ExclusionRule
		want  []string // substrings, one per expected error
	}{
		"scheduler-critical set": {rules: SchedulerCriticalRules(DefaultSchedulerUser)},
		"no rules":               {rules: nil, want: []string{"excludeResourceRules: Required value"}},
		"everything, all empty":  {rules: []ExclusionRule{{}}, want: []string{"excludeResourceRules[0]: Invalid value: \"every request\""}},
		"everything, wildcards":  {rules: []ExclusionRule{{APIGroups: []string{"*"}, Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.AllScopes)}}, want: []string{"keeps the webhook from ever being called"}},
		// KEP-3693's own example of the blanket exclusion to refuse.
		"KEP-3693's blanket example": {
			rules: []ExclusionRule{{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Operations: []admissionregistrationv1.OperationType{"*"}, Resources: []string{"*"}}},
			want:  []string{"keeps the webhook from ever being called"},
		},
		"all resources, one user": {rules: []ExclusionRule{{Resources: []string{"*"}, Usernames: []string{"system:kube-scheduler"}}}},
		"empty username": {
			rules: []ExclusionRule{{Resources: []string{"pods"}, Usernames: []string{""}}},
			want:  []string{"excludeResourceRules[0].usernames[0]: Required value"},
		},
		"namespaces with Cluster scope": {
			rules: []ExclusionRule{{Resources: []string{"nodes"}, Scope: ptr.To(admissionregistrationv1.ClusterScope), Namespaces: []string{"kube-system"}}},
			want:  []string{"excludeResourceRules[0].namespaces: Forbidden: requests for cluster-scoped resources have no namespace"},
		},
		"bad names": {
			rules: []ExclusionRule{{
				APIGroups: []string{"Not_A_Group"}, Operations: []admissionregistrationv1.OperationType{"PATCH"},
				Resources: []string{"pods/a/b", "", "*/"}, Scope: ptr.To(admissionregistrationv1.ScopeType("Global")),
				ObjectNames: []string{"a/b"}, Namespaces: []string{"Kube_System"},
			}},
			want: []string{
				"excludeResourceRules[0].apiGroups[0]: Invalid value",
				`excludeResourceRules[0].operations[0]: Unsupported value: "PATCH"`,
				`excludeResourceRules[0].resources[0]: Invalid value: "pods/a/b"`,
				"excludeResourceRules[0].resources[1]: Required value",
				`excludeResourceRules[0].resources[2]: Invalid value: "*/"`,
				`excludeResourceRules[0].scope: Unsupported value: "Global"`,
				`excludeResourceRules[0].objectNames[0]: Invalid value: "a/b"`,
				`excludeResourceRules[0].namespaces[0]: Invalid value: "Kube_System"`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			errs := ValidateRules(tc.rules, rulesPath)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d errors, want %d: %v", len(errs), len(tc.want), errs)
			}
			for i, want := range tc.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d: %q, want it to contain %q", i, errs[i].Error(), want)
				}
			}
		})
	}
}

// The compiled expression excludes a request exactly when the apiserver's
// own webhook rule matcher, given the same fields as a rule, matches it.
func TestExpressionAgreesWithTheApiserversRuleMatcher(t *testing.T) {
	ruleSets := []ExclusionRule{
		{APIGroups: []string{""}, APIVersions: []string{"v1"}, Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Resources: []string{"pods/binding"}},
		{Resources: []string{"pods"}},
		{Resources: []string{"pods/*"}},
		{Resources: []string{"*/status"}, Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update}},
		{Resources: []string{"*"}, APIGroups: []string{"apps", "resource.k8s.io"}},
		{Resources: []string{"namespaces", "nodes"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
		{Resources: []string{"*/*"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope), APIVersions: []string{"v1"}},
		{APIGroups: []string{"*"}, Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete, admissionregistrationv1.OperationAll}, Resources: []string{"leases"}},
	}
	var requests []Request
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "namespaces"}, {Version: "v1", Resource: "nodes"},
		{Group: "apps", Version: "v1", Resource: "deployments"}, {Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
		{Group: "coordination.k8s.io", Version: "v1beta1", Resource: "leases"},
	} {
		for _, sub := range []string{"", "binding", "status"} {
			for _, op := range []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete} {
				for _, ns := range []string{"", "team-a"} {
					requests = append(requests, Request{Resource: gvr, SubResource: sub, Operation: op, Namespace: ns, Name: "x", User: "u"})
				}
			}
		}
	}
	for i, rule := range ruleSets {
		asWebhookRule := admissionregistrationv1.RuleWithOperations{
			Operations: orAll(rule.Operations),
			Rule: admissionregistrationv1.Rule{
				APIGroups: orAll(rule.APIGroups), APIVersions: orAll(rule.APIVersions),
				Resources: rule.Resources, Scope: rule.Scope,
			},
		}
		if len(asWebhookRule.Resources) == 0 {
			asWebhookRule.Resources = []string{"*/*"}
		}
		conditions := Compile([]ExclusionRule{rule})
		if errs := Check(conditions, []ExclusionRule{rule}, field.NewPath("matchConditions"), 0); len(errs) > 0 {
			t.Fatalf("rule %d: %v", i, errs)
		}
		// A webhook for everything, with the exclusion as its condition.
		w := Webhook{
			Rules:           []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"*"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}}}},
			MatchConditions: conditions,
		}
		for _, r := range requests {
			excluded := (&rules.Matcher{Rule: asWebhookRule, Attr: r.attributes()}).Matches()
			v := w.Reaches(context.Background(), r)
			if v.Err != nil {
				t.Fatalf("rule %d, %s: %v", i, r, v.Err)
			}
			if v.Reaches == excluded {
				t.Errorf("rule %d (%s), %s: reaches=%v, but the apiserver's matcher says excluded=%v", i, conditions[0].Expression, r, v.Reaches, excluded)
			}
		}
	}
}

func orAll[T ~string](list []T) []T {
	if len(list) == 0 {
		return []T{"*"}
	}
	return list
}

func TestSchedulerWritesAreExcludedOrdinaryPodsAreNot(t *testing.T) {
	ctx := context.Background()
	fail := admissionregistrationv1.Fail
	w := Webhook{
		FailurePolicy: &fail,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{"*"},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
		}},
		// An existing condition is kept, and still applies.
		MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "not-kube-public", Expression: `!has(request.namespace) || request.namespace != "kube-public"`}},
	}
	for _, r := range SchedulerWrites("team-a") {
		if v := w.Reaches(ctx, r); !v.Reaches {
			t.Fatalf("before exclusion, %s does not reach the webhook: %+v", r, v)
		}
	}
	merged, err := Merge(w.MatchConditions, Compile(SchedulerCriticalRules(DefaultSchedulerUser)))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Merge(merged, Compile(SchedulerCriticalRules(DefaultSchedulerUser))); err != nil || len(again) != len(merged) {
		t.Errorf("excluding twice: %d conditions, %v; want %d and no error", len(again), err, len(merged))
	}
	w.MatchConditions = merged
	for _, r := range SchedulerWrites("team-a") {
		if v := w.Reaches(ctx, r); v.Reaches || !strings.HasPrefix(v.ExcludedBy, ConditionPrefix) {
			t.Errorf("after exclusion, %s: %+v; want it excluded by a %s condition", r, v, ConditionPrefix)
		}
	}
	pod := Request{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Operation: admissionregistrationv1.Create, Namespace: "team-a", Name: "p", User: "alice"}
	if v := w.Reaches(ctx, pod); !v.Reaches {
		t.Errorf("an ordinary pod no longer reaches the webhook: %+v", v)
	}
	// The same writes by another user (kube-scheduler binding its pods,
	// anyone updating claim status) still reach it.
	for _, r := range SchedulerWrites("team-a") {
		r.User = "system:kube-scheduler"
		if v := w.Reaches(ctx, r); !v.Reaches {
			t.Errorf("after exclusion, %s by %s does not reach the webhook: %+v", r, r.User, v)
		}
	}
	otherLease := Request{Resource: schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, Operation: admissionregistrationv1.Update, Namespace: "kube-system", Name: "kube-scheduler"}
	if v := w.Reaches(ctx, otherLease); !v.Reaches {
		t.Errorf("another component's lease no longer reaches the webhook: %+v", v)
	}
	pod.Namespace = "kube-public"
	if v := w.Reaches(ctx, pod); v.Reaches || v.ExcludedBy != "not-kube-public" {
		t.Errorf("the existing condition no longer applies: %+v", v)
	}
}

func TestMergeStaysWithinTheLimit(t *testing.T) {
	var existing []admissionregistrationv1.MatchCondition
	for i := range 62 {
		existing = append(existing, admissionregistrationv1.MatchCondition{Name: "c" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Expression: "true"})
	}
	conditions := Compile(SchedulerCriticalRules(DefaultSchedulerUser))
	merged, err := Merge(existing, conditions)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%smerged-%d-rules-", ConditionPrefix, len(conditions)); len(merged) != 63 || !strings.HasPrefix(merged[62].Name, want) {
		t.Fatalf("%d conditions, last %q; want 63, the %d rules merged into one (%s...)", len(merged), merged[62].Name, len(conditions), want)
	}
	if errs := Check(merged[62:], SchedulerCriticalRules(DefaultSchedulerUser), field.NewPath("matchConditions"), 62); len(errs) > 0 {
		t.Errorf("the merged condition: %v", errs)
	}
	full := append(existing, admissionregistrationv1.MatchCondition{Name: "x", Expression: "true"}, admissionregistrationv1.MatchCondition{Name: "y", Expression: "true"})
	if _, err := Merge(full, conditions); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Errorf("64 existing conditions: %v, want an error", err)
	}
}

func TestCheckRefusesWhatTheApiserverWould(t *testing.T) {
	path := field.NewPath("webhooks").Index(0).Child("matchConditions")
	bad := []admissionregistrationv1.MatchCondition{{Name: "broken", Expression: `request.resource.group ==`}}
	if errs := Check(bad, nil, path, 0); len(errs) != 1 || !strings.Contains(errs[0].Error(), "webhooks[0].matchConditions[0].expression: Invalid value") || !strings.Contains(errs[0].Error(), "compilation failed") {
		t.Errorf("errors %v, want one compilation error with its path", errs)
	}
	notBool := []admissionregistrationv1.MatchCondition{{Name: "string", Expression: `request.name`}}
	if errs := Check(notBool, nil, path, 0); len(errs) != 1 || !strings.Contains(errs[0].Error(), "must evaluate to bool") {
		t.Errorf("errors %v, want a type error", errs)
	}
	// A rule whose expression is longer than the apiserver parses (100,000
	// code points).
	huge := ExclusionRule{Resources: []string{"configmaps"}}
	for i := range 2000 {
		huge.ObjectNames = append(huge.ObjectNames, fmt.Sprintf("%s-%05d", strings.Repeat("n", 50), i))
	}
	if errs := Check(Compile([]ExclusionRule{huge}), []ExclusionRule{huge}, path, 0); len(errs) != 1 || !strings.Contains(errs[0].Error(), "expression code point size exceeds limit") || len(errs[0].Error()) > 1000 {
		t.Errorf("a 120 kB expression: %.300v, want it refused for its size, in a short message", errs)
	}
}

func TestParseRules(t *testing.T) {
	want := []ExclusionRule{{Resources: []string{"pods/binding"}, Operations: []admissionregistrationv1.OperationType{"CREATE"}}}
	for name, text := range map[string]string{
		"KEP form":  "excludeResourceRules:\n- resources: [pods/binding]\n  operations: [CREATE]\n",
		"bare list": "- resources: [pods/binding]\n  operations: [CREATE]\n",
	} {
		got, err := ParseRules([]byte(text))
		if err != nil || !cmp.Equal(got, want) {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, want)
		}
	}
	if _, err := ParseRules([]byte("excludeResourceRules:\n- resource: [pods]\n")); err == nil || !strings.Contains(err.Error(), `unknown field "resource"`) {
		t.Errorf("a misspelt field: %v, want an unknown field error", err)
	}
}

// The commented example in manifests is the built-in set.
func TestExampleIsTheSchedulerCriticalSet(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "examples", "webhook-exclusions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRules(data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(SchedulerCriticalRules(DefaultSchedulerUser), got); diff != "" {
		t.Errorf("manifests/examples/webhook-exclusions.yaml differs from SchedulerCriticalRules (-built-in +file):\n%s", diff)
	}
}
