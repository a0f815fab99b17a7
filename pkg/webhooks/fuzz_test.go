package webhooks

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzRules feeds `kubectl dra webhooks exclude -f` whatever a stranger's
// file holds: parsing, validation and, for rules that pass, compiling with
// the apiserver's CEL environment must never panic, and a rule that passes
// validation must compile to an expression the apiserver accepts.
func FuzzRules(f *testing.F) {
	for _, seed := range []string{
		"excludeResourceRules:\n- apiGroups: [\"\"]\n  apiVersions: [\"v1\"]\n  operations: [\"CREATE\"]\n  resources: [\"pods/binding\"]\n",
		"- resources: [\"*\"]\n  usernames: [\"system:kube-scheduler\"]\n",
		"- apiGroups: [\"*\"]\n  apiVersions: [\"*\"]\n  operations: [\"*\"]\n  resources: [\"*\"]\n",
		"- scope: Cluster\n  namespaces: [kube-system]\n  resources: [nodes]\n",
		"- objectNames: [\"a\\\"b\"]\n  resources: [\"pods\"]\n",
		"[{\"resources\": [\"*/status\"], \"namespaces\": [\"x\"]}]",
		"excludeResourceRules: 7",
		"- resources: [\"pods/a/b\", \"*/\"]\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := ParseRules(data)
		if err != nil {
			return
		}
		path := field.NewPath("excludeResourceRules")
		if errs := ValidateRules(rules, path); len(errs) > 0 {
			return
		}
		conditions := Compile(rules)
		if len(conditions) > MaxMatchConditions {
			return // Merge would fold them; Check sees them one by one here
		}
		if errs := Check(conditions, rules, field.NewPath("matchConditions"), 0); len(errs) > 0 {
			// Cost and size limits may refuse a valid rule (thousands of
			// names); anything else is a compiler bug.
			for _, e := range errs {
				if e.Type != field.ErrorTypeInvalid {
					t.Errorf("valid rules %+v: %v", rules, errs)
				}
			}
		}
	})
}
