package webhooks

import (
	"context"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"
)

// budget is the apiserver's runtime cost budget for a webhook's match
// conditions on one request.
const budget = celconfig.RuntimeCELCostBudgetMatchConditions

// Request is one API write as admission sees it.
type Request struct {
	Resource    schema.GroupVersionResource
	SubResource string
	Operation   admissionregistrationv1.OperationType
	Namespace   string
	Name        string
	// User is who sends it; match conditions may look at request.userInfo.
	User string
}

// Label names the kind of write, without the object: "CREATE pods/binding".
func (r Request) Label() string {
	resource := r.Resource.Resource
	if r.SubResource != "" {
		resource += "/" + r.SubResource
	}
	if r.Resource.Group != "" {
		resource += "." + r.Resource.Group
	}
	return string(r.Operation) + " " + resource
}

func (r Request) String() string {
	if r.Namespace != "" {
		return r.Label() + " " + r.Namespace + "/" + r.Name
	}
	return r.Label() + " " + r.Name
}

// attributes is the request in the form the apiserver's admission code
// takes. The objects are left out: match conditions that read them get
// null.
func (r Request) attributes() *admission.VersionedAttributes {
	attr := admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{}, r.Namespace, r.Name, r.Resource, r.SubResource,
		admission.Operation(r.Operation), nil, false, &user.DefaultInfo{Name: r.User})
	return &admission.VersionedAttributes{Attributes: attr}
}

// Webhook is what decides whether a request reaches one webhook of a
// validating or mutating configuration.
type Webhook struct {
	Rules           []admissionregistrationv1.RuleWithOperations
	MatchConditions []admissionregistrationv1.MatchCondition
	FailurePolicy   *admissionregistrationv1.FailurePolicyType
}

// Verdict says whether a request reaches a webhook, and why not.
type Verdict struct {
	// RulesMatch: the webhook's rules select the request.
	RulesMatch bool
	// Reaches: the rules select it and the match conditions let it through
	// (or fail to evaluate under failurePolicy Fail, which rejects the
	// request: the webhook is still in the way).
	Reaches bool
	// ExcludedBy names the match condition that keeps the request away.
	ExcludedBy string
	// Err is a match condition evaluation error.
	Err error
}

// denyAll stands in for the apiserver's authorizer: audit cannot know what
// an authorizer check in a match condition would decide, and denying is the
// answer that does not assume privileges.
type denyAll struct{}

func (denyAll) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "evaluated by kubectl dra, which cannot authorize", nil
}

// Reaches evaluates the webhook's rules with the apiserver's rule matcher
// and its match conditions with the apiserver's CEL library. Namespace and
// object selectors are not evaluated: a request is taken to pass them.
func (w Webhook) Reaches(ctx context.Context, r Request) Verdict {
	attr := r.attributes()
	var v Verdict
	for _, rule := range w.Rules {
		if (&rules.Matcher{Rule: rule, Attr: attr}).Matches() {
			v.RulesMatch = true
			break
		}
	}
	if !v.RulesMatch {
		return v
	}
	if len(w.MatchConditions) == 0 {
		v.Reaches = true
		return v
	}
	compiler, _ := compilers()
	result := matchconditions.NewMatcher(compiler.CompileCondition(accessors(w.MatchConditions), matchConditionVars, environment.StoredExpressions),
		w.FailurePolicy, "webhook", "audit", "").Match(ctx, attr, nil, denyAll{})
	switch {
	case result.Error != nil:
		v.Err = result.Error
		v.Reaches = w.FailurePolicy == nil || *w.FailurePolicy == admissionregistrationv1.Fail
	case result.Matches:
		v.Reaches = true
	default:
		v.ExcludedBy = result.FailedConditionName
	}
	return v
}

func accessors(conditions []admissionregistrationv1.MatchCondition) []plugincel.ExpressionAccessor {
	out := make([]plugincel.ExpressionAccessor, len(conditions))
	for i, c := range conditions {
		out[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
	}
	return out
}

// evaluationCost is what evaluating conditions on r costs, in the units of
// the apiserver's budget.
func evaluationCost(conditions []admissionregistrationv1.MatchCondition, r Request) (int64, error) {
	compiler, _ := compilers()
	evaluator := compiler.CompileCondition(accessors(conditions), matchConditionVars, environment.NewExpressions)
	attr := r.attributes()
	results, remaining, err := evaluator.ForInput(context.Background(), attr,
		plugincel.CreateAdmissionRequest(attr.Attributes, metav1.GroupVersionResource(r.Resource), metav1.GroupVersionKind{}),
		plugincel.OptionalVariableBindings{Authorizer: denyAll{}}, nil, budget)
	if err != nil {
		return 0, err
	}
	for _, result := range results {
		if result.Error != nil {
			return 0, result.Error
		}
	}
	return budget - remaining, nil
}

// exampleRequest is a request that rule matches, so that evaluating its
// condition evaluates every term.
func exampleRequest(rule ExclusionRule) Request {
	first := func(list []string, otherwise string) string {
		for _, item := range list {
			if item != "*" {
				return item
			}
		}
		return otherwise
	}
	r := Request{
		Resource:  schema.GroupVersionResource{Group: first(rule.APIGroups, "example.com"), Version: first(rule.APIVersions, "v1"), Resource: "examples"},
		Operation: admissionregistrationv1.Create,
		Name:      first(rule.ObjectNames, "example"),
		User:      "system:serviceaccount:kube-system:drascope-scheduler",
	}
	for _, op := range rule.Operations {
		if op != admissionregistrationv1.OperationAll {
			r.Operation = op
			break
		}
	}
	if len(rule.Resources) > 0 {
		res, sub, _ := strings.Cut(rule.Resources[0], "/")
		if res != "*" {
			r.Resource.Resource = res
		}
		if sub != "*" {
			r.SubResource = sub
		}
	}
	if rule.Scope == nil || *rule.Scope != admissionregistrationv1.ClusterScope {
		r.Namespace = first(rule.Namespaces, "default")
	}
	return r
}
