package webhooks

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The apiserver's defaults for a webhook that leaves them unset
// (admissionregistration.k8s.io/v1).
const (
	DefaultFailurePolicy  = admissionregistrationv1.Fail
	DefaultTimeoutSeconds = 10
)

// Finding is what the audit found of one webhook that drascope-scheduler's
// writes reach, or that its matchConditions exclude them from.
type Finding struct {
	// Kind is Validating or Mutating.
	Kind, Configuration, Name string
	// FailurePolicy and TimeoutSeconds are the webhook's, defaulted as the
	// apiserver defaults them.
	FailurePolicy  admissionregistrationv1.FailurePolicyType
	TimeoutSeconds int32
	// Selectors: the webhook has a namespaceSelector or objectSelector,
	// which the audit does not evaluate; it is listed as if they matched.
	Selectors bool
	// Reached are the writes that reach the webhook (Request.Label, with
	// " (condition error)" when a condition failed to evaluate, which
	// counts as a match); Excluded those that its rules match but its
	// matchConditions exclude, with the excluding condition.
	Reached, Excluded []string
}

// Blocks reports whether the webhook can make a scheduler write fail: it
// is reached, and failurePolicy Fail turns its being down into a refusal.
func (f Finding) Blocks() bool {
	return f.FailurePolicy == admissionregistrationv1.Fail && len(f.Reached) > 0
}

// Audit evaluates every webhook of the configurations against the writes
// drascope-scheduler makes for pods in namespace (SchedulerWrites), with the
// apiserver's rule matcher and match-condition evaluator, and returns those
// that any write's rules select, in the order given.
func Audit(ctx context.Context, validating []admissionregistrationv1.ValidatingWebhookConfiguration, mutating []admissionregistrationv1.MutatingWebhookConfiguration, namespace string) []Finding {
	writes := SchedulerWrites(namespace)
	var findings []Finding
	check := func(f Finding, w Webhook, timeout *int32, namespaceSelector, objectSelector *metav1.LabelSelector) {
		for _, r := range writes {
			verdict := w.Reaches(ctx, r)
			switch {
			case !verdict.RulesMatch:
			case verdict.Reaches:
				label := r.Label()
				if verdict.Err != nil {
					label += " (condition error)"
				}
				f.Reached = append(f.Reached, label)
			default:
				f.Excluded = append(f.Excluded, r.Label()+" ("+verdict.ExcludedBy+")")
			}
		}
		if len(f.Reached) == 0 && len(f.Excluded) == 0 {
			return
		}
		f.FailurePolicy = DefaultFailurePolicy
		if w.FailurePolicy != nil {
			f.FailurePolicy = *w.FailurePolicy
		}
		f.TimeoutSeconds = DefaultTimeoutSeconds
		if timeout != nil {
			f.TimeoutSeconds = *timeout
		}
		f.Selectors = hasSelector(namespaceSelector) || hasSelector(objectSelector)
		findings = append(findings, f)
	}
	for _, c := range validating {
		for _, w := range c.Webhooks {
			check(Finding{Kind: "Validating", Configuration: c.Name, Name: w.Name},
				Webhook{Rules: w.Rules, MatchConditions: w.MatchConditions, FailurePolicy: w.FailurePolicy},
				w.TimeoutSeconds, w.NamespaceSelector, w.ObjectSelector)
		}
	}
	for _, c := range mutating {
		for _, w := range c.Webhooks {
			check(Finding{Kind: "Mutating", Configuration: c.Name, Name: w.Name},
				Webhook{Rules: w.Rules, MatchConditions: w.MatchConditions, FailurePolicy: w.FailurePolicy},
				w.TimeoutSeconds, w.NamespaceSelector, w.ObjectSelector)
		}
	}
	return findings
}

func hasSelector(s *metav1.LabelSelector) bool {
	return s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0)
}
