// Package webhooks gives cluster operators the exclusion rules of KEP-3693
// ("all but X and Y" for admission webhooks) by compiling them to the CEL
// matchConditions the apiserver already evaluates before calling a webhook
// (KEP-3716), and tells which webhooks sit in the scheduler's write path.
//
// Every expression is compiled, and every evaluation done, with the
// apiserver's own CEL library for webhook match conditions; nothing here
// re-implements how the apiserver matches a request.
package webhooks

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// ExclusionRule is one KEP-3693 exclusion rule: the requests it describes
// must not reach the webhook. An empty list matches everything, as in the
// KEP, and so does "*".
type ExclusionRule struct {
	// APIGroups of the requested resource; "" is the core group.
	APIGroups []string `json:"apiGroups,omitempty"`
	// APIVersions of the requested resource.
	APIVersions []string `json:"apiVersions,omitempty"`
	// Operations: CREATE, UPDATE, DELETE, CONNECT or "*".
	Operations []admissionregistrationv1.OperationType `json:"operations,omitempty"`
	// Resources as in webhook rules: "pods", "pods/binding", "pods/*",
	// "*/status", "*" (every resource, no subresource) or "*/*".
	Resources []string `json:"resources,omitempty"`
	// Scope: Cluster, Namespaced or "*" (the default).
	Scope *admissionregistrationv1.ScopeType `json:"scope,omitempty"`
	// ObjectNames of the requested objects.
	ObjectNames []string `json:"objectNames,omitempty"`
	// Namespaces of the requests; not allowed with scope Cluster.
	Namespaces []string `json:"namespaces,omitempty"`
	// Usernames of the requesting users (request.userInfo.username), a
	// drascope extension of KEP-3693's rules: an exclusion meant for one
	// component's writes should not exclude everyone's.
	Usernames []string `json:"usernames,omitempty"`
}

// ruleFile is the file form, after the KEP's sample.
type ruleFile struct {
	ExcludeResourceRules []ExclusionRule `json:"excludeResourceRules"`
}

// ParseRules reads rules in the KEP's form (an object with
// excludeResourceRules), or a bare list of rules. Unknown fields are errors.
func ParseRules(data []byte) ([]ExclusionRule, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("no rules: want excludeResourceRules: [...]")
	}
	var file ruleFile
	if err := yaml.UnmarshalStrict(data, &file); err == nil {
		return file.ExcludeResourceRules, nil
	} else if !bytes.HasPrefix(trimmed, []byte("-")) && !bytes.HasPrefix(trimmed, []byte("[")) {
		return nil, fmt.Errorf("reading exclusion rules: %w", err)
	}
	var list []ExclusionRule
	if err := yaml.UnmarshalStrict(data, &list); err != nil {
		return nil, fmt.Errorf("reading exclusion rules: %w", err)
	}
	return list, nil
}

var (
	supportedOperations = []string{string(admissionregistrationv1.Create), string(admissionregistrationv1.Update),
		string(admissionregistrationv1.Delete), string(admissionregistrationv1.Connect), string(admissionregistrationv1.OperationAll)}
	supportedScopes = []string{string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes)}
)

// ValidateRules checks rules as the KEP asks: an exclusion that matches
// every request is refused (it would switch the webhook off; delete it
// instead), namespaces are refused with scope Cluster, and names, resources,
// operations and scopes must be valid. Errors carry field paths under path.
func ValidateRules(rules []ExclusionRule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rules) == 0 {
		errs = append(errs, field.Required(path, "at least one exclusion rule"))
	}
	for i, rule := range rules {
		errs = append(errs, validateRule(rule, path.Index(i))...)
	}
	return errs
}

func validateRule(rule ExclusionRule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, group := range rule.APIGroups {
		if group != "" && group != "*" {
			for _, msg := range validation.IsDNS1123Subdomain(group) {
				errs = append(errs, field.Invalid(path.Child("apiGroups").Index(i), group, msg))
			}
		}
	}
	for i, version := range rule.APIVersions {
		if version == "" {
			errs = append(errs, field.Required(path.Child("apiVersions").Index(i), "a version, or \"*\""))
		} else if version != "*" {
			for _, msg := range validation.IsDNS1123Label(version) {
				errs = append(errs, field.Invalid(path.Child("apiVersions").Index(i), version, msg))
			}
		}
	}
	for i, op := range rule.Operations {
		if !slices.Contains(supportedOperations, string(op)) {
			errs = append(errs, field.NotSupported(path.Child("operations").Index(i), op, supportedOperations))
		}
	}
	for i, resource := range rule.Resources {
		errs = append(errs, validateResource(resource, path.Child("resources").Index(i))...)
	}
	if rule.Scope != nil && !slices.Contains(supportedScopes, string(*rule.Scope)) {
		errs = append(errs, field.NotSupported(path.Child("scope"), *rule.Scope, supportedScopes))
	}
	for i, name := range rule.ObjectNames {
		if name == "" {
			errs = append(errs, field.Required(path.Child("objectNames").Index(i), "an object name"))
		}
		for _, msg := range content.IsPathSegmentName(name) {
			errs = append(errs, field.Invalid(path.Child("objectNames").Index(i), name, msg))
		}
	}
	for i, ns := range rule.Namespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(path.Child("namespaces").Index(i), ns, msg))
		}
	}
	for i, name := range rule.Usernames {
		if name == "" {
			errs = append(errs, field.Required(path.Child("usernames").Index(i), "a username, such as system:serviceaccount:kube-system:drascope-scheduler"))
		}
	}
	if len(rule.Namespaces) > 0 && rule.Scope != nil && *rule.Scope == admissionregistrationv1.ClusterScope {
		errs = append(errs, field.Forbidden(path.Child("namespaces"), "requests for cluster-scoped resources have no namespace; drop namespaces or use scope Namespaced"))
	}
	if len(errs) == 0 && matchesEverything(rule) {
		errs = append(errs, field.Invalid(path, "every request", "an exclusion that matches every request keeps the webhook from ever being called; narrow it, or delete the webhook"))
	}
	return errs
}

// validateResource accepts what webhook rules accept: "resource",
// "resource/subresource", with "*" for either part.
func validateResource(resource string, path *field.Path) field.ErrorList {
	res, sub, hasSub := strings.Cut(resource, "/")
	var errs field.ErrorList
	switch {
	case resource == "":
		return field.ErrorList{field.Required(path, "a resource, such as pods or pods/binding")}
	case strings.Contains(sub, "/"):
		return field.ErrorList{field.Invalid(path, resource, "want resource or resource/subresource")}
	case res == "*" && hasSub && sub == "":
		return field.ErrorList{field.Invalid(path, resource, "want */* or */subresource")}
	}
	for _, part := range []string{res, sub} {
		if part == "" || part == "*" {
			continue
		}
		for _, msg := range validation.IsDNS1123Label(part) {
			errs = append(errs, field.Invalid(path, resource, msg))
		}
	}
	if hasSub && sub == "" {
		errs = append(errs, field.Invalid(path, resource, "empty subresource"))
	}
	return errs
}

// wildcard reports whether a list matches everything: empty, or containing "*".
func wildcard[T ~string](list []T) bool {
	return len(list) == 0 || slices.Contains(list, T("*"))
}

// matchesEverything reports whether a rule excludes every request, or
// every request to a resource itself ("*", KEP-3693's own example of the
// blanket exclusion to refuse): all but subresources is no narrower.
func matchesEverything(rule ExclusionRule) bool {
	return wildcard(rule.APIGroups) && wildcard(rule.APIVersions) && wildcard(rule.Operations) &&
		(len(rule.Resources) == 0 || slices.Contains(rule.Resources, "*/*") || slices.Contains(rule.Resources, "*")) &&
		(rule.Scope == nil || *rule.Scope == admissionregistrationv1.AllScopes) &&
		len(rule.ObjectNames) == 0 && len(rule.Namespaces) == 0 && len(rule.Usernames) == 0
}
