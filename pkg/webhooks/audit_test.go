package webhooks

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestAudit(t *testing.T) {
	bindings := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}},
	}}
	deployments := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
	}}
	notScheduler := []admissionregistrationv1.MatchCondition{{
		Name:       "not-the-scheduler",
		Expression: `request.userInfo.username != "system:serviceaccount:kube-system:drascope-scheduler"`,
	}}
	validating := []admissionregistrationv1.ValidatingWebhookConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "defaults.example.com", Rules: bindings},
			{Name: "ignored.example.com", Rules: bindings, FailurePolicy: ptr.To(admissionregistrationv1.Ignore), TimeoutSeconds: ptr.To[int32](3),
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
			{Name: "elsewhere.example.com", Rules: deployments},
		},
	}}
	mutating := []admissionregistrationv1.MutatingWebhookConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "inject"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "excluded.example.com", Rules: bindings, MatchConditions: notScheduler}},
	}}

	got := Audit(context.Background(), validating, mutating, "default")
	want := []Finding{
		{Kind: "Validating", Configuration: "policy", Name: "defaults.example.com", FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 10,
			Reached: []string{"CREATE pods/binding"}},
		{Kind: "Validating", Configuration: "policy", Name: "ignored.example.com", FailurePolicy: admissionregistrationv1.Ignore, TimeoutSeconds: 3,
			Selectors: true, Reached: []string{"CREATE pods/binding"}},
		{Kind: "Mutating", Configuration: "inject", Name: "excluded.example.com", FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 10,
			Excluded: []string{"CREATE pods/binding (not-the-scheduler)"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	for i, blocks := range []bool{true, false, false} {
		if got[i].Blocks() != blocks {
			t.Errorf("%s: Blocks() = %v, want %v", got[i].Name, got[i].Blocks(), blocks)
		}
	}
}
