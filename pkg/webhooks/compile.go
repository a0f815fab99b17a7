package webhooks

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// ConditionPrefix starts the name of every match condition drascope writes,
// so that a person reading a webhook configuration sees where it came from.
const ConditionPrefix = "drascope-exclude-"

// MaxMatchConditions is how many match conditions the apiserver allows per
// webhook.
const MaxMatchConditions = 64

// Optional fields of the admission request: absent, not empty, when unset
// (namespace of cluster-scoped objects, subResource, name of some creates).
const (
	requestNamespace   = `(has(request.namespace) ? request.namespace : "")`
	requestSubResource = `(has(request.subResource) ? request.subResource : "")`
	requestName        = `(has(request.name) ? request.name : "")`
)

// Expression is the CEL expression over the admission request that is true
// when rule does NOT match, so the webhook is called: a webhook is called
// only when all of its match conditions are true.
func Expression(rule ExclusionRule) string {
	var terms []string
	if !wildcard(rule.APIGroups) {
		terms = append(terms, "request.resource.group in "+celList(rule.APIGroups))
	}
	if !wildcard(rule.APIVersions) {
		terms = append(terms, "request.resource.version in "+celList(rule.APIVersions))
	}
	if !wildcard(rule.Operations) {
		terms = append(terms, "request.operation in "+celList(rule.Operations))
	}
	if term := resourcesTerm(rule.Resources); term != "" {
		terms = append(terms, term)
	}
	if rule.Scope != nil {
		// As the apiserver's rule matcher: a Namespace object is cluster
		// scoped, although its requests carry its name as namespace.
		const isNamespace = `(request.resource.group == "" && request.resource.resource == "namespaces")`
		switch *rule.Scope {
		case admissionregistrationv1.ClusterScope:
			terms = append(terms, `(`+requestNamespace+` == "" || `+isNamespace+`)`)
		case admissionregistrationv1.NamespacedScope:
			terms = append(terms, `(`+requestNamespace+` != "" && !`+isNamespace+`)`)
		}
	}
	if len(rule.ObjectNames) > 0 {
		terms = append(terms, requestName+" in "+celList(rule.ObjectNames))
	}
	if len(rule.Namespaces) > 0 {
		terms = append(terms, requestNamespace+" in "+celList(rule.Namespaces))
	}
	if len(rule.Usernames) > 0 {
		terms = append(terms, "request.userInfo.username in "+celList(rule.Usernames))
	}
	return "!(" + strings.Join(terms, " && ") + ")"
}

// resourcesTerm matches "resource[/subresource]" entries as webhook rules
// do; "" when every resource and subresource matches.
func resourcesTerm(resources []string) string {
	var alternatives []string
	for _, entry := range resources {
		res, sub, _ := strings.Cut(entry, "/")
		var parts []string
		if res != "*" {
			parts = append(parts, "request.resource.resource == "+strconv.Quote(res))
		}
		if sub != "*" {
			parts = append(parts, requestSubResource+" == "+strconv.Quote(sub))
		}
		if len(parts) == 0 {
			return "" // "*/*"
		}
		alternatives = append(alternatives, "("+strings.Join(parts, " && ")+")")
	}
	if len(alternatives) == 0 {
		return ""
	}
	return "(" + strings.Join(alternatives, " || ") + ")"
}

func celList[T ~string](items []T) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = strconv.Quote(string(item))
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

var unsafeNameChars = regexp.MustCompile(`[^a-z0-9]+`)

// conditionName names a condition after what its rule excludes, with a
// hash of the expression so that the same rule always gets the same name
// (running exclude twice changes nothing) and different rules never share
// one. Names are qualified names of at most 63 characters.
func conditionName(what, expression string) string {
	sum := sha256.Sum256([]byte(expression))
	hash := hex.EncodeToString(sum[:])[:8]
	slug := strings.Trim(unsafeNameChars.ReplaceAllString(strings.ToLower(what), "-"), "-")
	if max := 63 - len(ConditionPrefix) - len(hash) - 1; len(slug) > max {
		slug = strings.Trim(slug[:max], "-")
	}
	if slug == "" {
		return ConditionPrefix + hash
	}
	return ConditionPrefix + slug + "-" + hash
}

// describe is a short description of what a rule excludes, for its name.
func describe(rule ExclusionRule) string {
	what := "any"
	if len(rule.Resources) > 0 {
		what = strings.Join(rule.Resources, "-")
	}
	if !wildcard(rule.Operations) {
		ops := make([]string, len(rule.Operations))
		for i, op := range rule.Operations {
			ops[i] = string(op)
		}
		what += "-" + strings.Join(ops, "-")
	}
	return strings.ReplaceAll(what, "*", "all")
}

// Compile turns valid rules into match conditions, one per rule. Call
// ValidateRules first.
func Compile(rules []ExclusionRule) []admissionregistrationv1.MatchCondition {
	conditions := make([]admissionregistrationv1.MatchCondition, 0, len(rules))
	for _, rule := range rules {
		expression := Expression(rule)
		conditions = append(conditions, admissionregistrationv1.MatchCondition{Name: conditionName(describe(rule), expression), Expression: expression})
	}
	return conditions
}

// Merge adds conditions to a webhook's existing ones, which are kept. A
// condition already present under the same name is not added again. When
// the result would pass MaxMatchConditions, the new conditions are merged
// into one (all must hold); if even that does not fit, it is an error.
func Merge(existing, conditions []admissionregistrationv1.MatchCondition) ([]admissionregistrationv1.MatchCondition, error) {
	have := map[string]string{}
	for _, c := range existing {
		have[c.Name] = c.Expression
	}
	var adding []admissionregistrationv1.MatchCondition
	for _, c := range conditions {
		if expr, ok := have[c.Name]; ok {
			if expr != c.Expression {
				return nil, fmt.Errorf("match condition %s already exists with another expression", c.Name)
			}
			continue
		}
		adding = append(adding, c)
	}
	if len(existing)+len(adding) > MaxMatchConditions && len(adding) > 1 {
		expressions := make([]string, len(adding))
		for i, c := range adding {
			expressions[i] = "(" + c.Expression + ")"
		}
		expression := strings.Join(expressions, " && ")
		adding = []admissionregistrationv1.MatchCondition{{Name: conditionName(fmt.Sprintf("merged-%d-rules", len(adding)), expression), Expression: expression}}
	}
	if len(existing)+len(adding) > MaxMatchConditions {
		return nil, fmt.Errorf("the webhook has %d match conditions; the apiserver allows %d, so even merged the exclusions do not fit", len(existing), MaxMatchConditions)
	}
	return append(append([]admissionregistrationv1.MatchCondition{}, existing...), adding...), nil
}

var (
	compilerOnce sync.Once
	compiler     plugincel.ConditionCompiler
	exprCompiler plugincel.Compiler
)

// compilers are the apiserver's CEL environment for webhook match
// conditions, as its admission webhook plugin and its validation of webhook
// configurations build them.
func compilers() (plugincel.ConditionCompiler, plugincel.Compiler) {
	compilerOnce.Do(func() {
		env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		compiler = plugincel.NewConditionCompiler(env)
		exprCompiler = plugincel.NewCompiler(env)
	})
	return compiler, exprCompiler
}

// matchConditionVars are the variables a webhook match condition may use.
var matchConditionVars = plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}

// Check compiles the conditions being added as the apiserver does when a
// webhook configuration is written (new expressions), and evaluates them
// together on requests that each match one of rules, so that every term is
// evaluated, checking that the cost stays within the apiserver's budget for
// a webhook's match conditions. The webhook's existing conditions are left
// out: the apiserver accepted them, and they may read what an example
// request lacks (the object). Errors carry field paths under path, the
// added conditions starting at index first.
func Check(conditions []admissionregistrationv1.MatchCondition, rules []ExclusionRule, path *field.Path, first int) field.ErrorList {
	var errs field.ErrorList
	_, exprs := compilers()
	for i, c := range conditions {
		result := exprs.CompileCELExpression(&matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}, matchConditionVars, environment.NewExpressions)
		if result.Error != nil {
			errs = append(errs, field.Invalid(path.Index(first+i).Child("expression"), shorten(c.Expression), result.Error.Error()))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	for _, rule := range rules {
		request := exampleRequest(rule)
		cost, err := evaluationCost(conditions, request)
		if err != nil {
			errs = append(errs, field.InternalError(path, fmt.Errorf("evaluating on %s: %w", request, err)))
		} else if cost > budget {
			errs = append(errs, field.Invalid(path, cost, fmt.Sprintf("evaluating on %s costs more than the apiserver's budget of %d for a webhook's match conditions", request, budget)))
		}
	}
	return errs
}

// shorten keeps an error about a long expression readable.
func shorten(expression string) string {
	const max = 200
	if len(expression) <= max {
		return expression
	}
	return expression[:max] + fmt.Sprintf("... (%d bytes)", len(expression))
}
