package webhooks

import (
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// The names drascope-scheduler writes under as manifests/scheduler deploys
// it: its ServiceAccount, and its leader election lease
// (leaderElection.resourceName there), which also decides who publishes
// ResourcePools. The ResourcePool API is named where it is defined.
const (
	// DefaultSchedulerUser is drascope-scheduler's user as manifests/scheduler
	// deploys it.
	DefaultSchedulerUser    = "system:serviceaccount:kube-system:drascope-scheduler"
	schedulerLeaseNamespace = "kube-system"
	schedulerLease          = "drascope-scheduler"
)

// schedulerWrite is one kind of write drascope-scheduler makes: why, and
// the narrowest exclusion rule that matches it (the user is added).
type schedulerWrite struct {
	why  string
	rule ExclusionRule
}

var (
	create = admissionregistrationv1.Create
	update = admissionregistrationv1.Update
	remove = admissionregistrationv1.Delete
)

// schedulerWrites are every write drascope-scheduler makes, as admission
// sees them (a PATCH is an UPDATE). The list is checked, not remembered:
// the integration tests run binding, preemption, gangs, health taints,
// publishing and leader election on an apiserver that audits every
// request of the scheduler's user, and fail on a write this list lacks
// (test/integration, checkSchedulerWrites). No scenario makes the
// scheduler create or delete claims (DRA extended resources), bind
// volumes or send a SubjectAccessReview: those entries are read from
// upstream.
var schedulerWrites = []schedulerWrite{
	{why: "Binding a pod to its node: the last write of every scheduling cycle.",
		rule: ExclusionRule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Operations: ops(create), Resources: []string{"pods/binding"}}},
	{why: "The claim's allocation and reservation, written in PreBind; the reservation removed when a binding fails; an idle claim deallocated in PostFilter. (With granular status authorization the apiserver checks resourceclaims/binding, but the request is an update of resourceclaims/status.)",
		rule: ExclusionRule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Operations: ops(update), Resources: []string{"resourceclaims/status"}}},
	{why: "The claim itself: its deletion-protection finalizer, added in PreBind before the allocation; and the claims for DRA extended resources, created for a pod and deleted when its binding fails.",
		rule: ExclusionRule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Operations: ops(create, update, remove), Resources: []string{"resourceclaims"}}},
	{why: "A pod's status: its PodScheduled condition and its nominated node.",
		rule: ExclusionRule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Operations: ops(update), Resources: []string{"pods/status"}}},
	{why: "Preemption: the victims are deleted.",
		rule: ExclusionRule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Operations: ops(remove), Resources: []string{"pods"}}},
	{why: "A PodGroup's conditions, after each of its scheduling cycles (workload-aware scheduling, docs/gangs.md).",
		rule: ExclusionRule{APIGroups: []string{"scheduling.k8s.io"}, APIVersions: []string{"*"}, Operations: ops(update), Resources: []string{"podgroups/status"}}},
	{why: "Volume binding, in PreBind, for pods with WaitForFirstConsumer claims (upstream's VolumeBinding plugin, on in every profile).",
		rule: ExclusionRule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Operations: ops(update), Resources: []string{"persistentvolumes", "persistentvolumeclaims"}}},
	{why: "DeviceTaintRules that taint devices kubelet reported Unhealthy (deviceHealth.policy Taint), and their removal.",
		rule: ExclusionRule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Operations: ops(create, update, remove), Resources: []string{"devicetaintrules"}}},
	{why: "Leader election of the scheduler (the leader also publishes ResourcePools).",
		rule: ExclusionRule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Operations: ops(create, update), Resources: []string{"leases"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope), Namespaces: []string{schedulerLeaseNamespace}, ObjectNames: []string{schedulerLease}}},
	{why: "Scheduling events (Scheduled, FailedScheduling, ...), and their series.",
		rule: ExclusionRule{APIGroups: []string{"", "events.k8s.io"}, APIVersions: []string{"v1"}, Operations: ops(create, update), Resources: []string{"events"}}},
	{why: "ResourcePool objects and their status (pool availability); pools that are gone are deleted.",
		rule: ExclusionRule{APIGroups: []string{v1alpha1.GroupName}, APIVersions: []string{"*"}, Resources: []string{"resourcepools", "resourcepools/status"}}},
	{why: "DeviceQuotas' status: what each namespace's allocations use (docs/quota.md).",
		rule: ExclusionRule{APIGroups: []string{v1alpha1.GroupName}, APIVersions: []string{"*"}, Operations: ops(update), Resources: []string{"devicequotas/status"}}},
	{why: "Serving /metrics: delegated authentication of each caller's token.",
		rule: ExclusionRule{APIGroups: []string{"authentication.k8s.io"}, APIVersions: []string{"v1"}, Operations: ops(create), Resources: []string{"tokenreviews"}}},
	{why: "Serving /metrics: delegated authorization of each caller.",
		rule: ExclusionRule{APIGroups: []string{"authorization.k8s.io"}, APIVersions: []string{"v1"}, Operations: ops(create), Resources: []string{"subjectaccessreviews"}}},
}

func ops(o ...admissionregistrationv1.OperationType) []admissionregistrationv1.OperationType {
	return o
}

// SchedulerCriticalRules exclude every write drascope-scheduler, as user,
// makes (schedulerWrites) from a webhook; the same writes by anyone else
// still reach it. manifests/examples/webhook-exclusions.yaml is the same
// set, commented.
func SchedulerCriticalRules(user string) []ExclusionRule {
	rules := make([]ExclusionRule, len(schedulerWrites))
	for i, w := range schedulerWrites {
		rules[i] = w.rule
		rules[i].Usernames = []string{user}
	}
	return rules
}

// SchedulerWrites are one request of each kind drascope-scheduler makes,
// for audit, as DefaultSchedulerUser; namespaced ones are in namespace.
func SchedulerWrites(namespace string) []Request {
	var writes []Request
	for _, w := range schedulerWrites {
		writes = append(writes, examples(w.rule, namespace)...)
	}
	return writes
}

// examples are a request of each group, resource and operation the rule
// names, every operation where it names none.
func examples(rule ExclusionRule, namespace string) []Request {
	operations := rule.Operations
	if len(operations) == 0 {
		operations = ops(create, update, remove)
	}
	version := "v1"
	if len(rule.APIVersions) > 0 && rule.APIVersions[0] != "*" {
		version = rule.APIVersions[0]
	}
	var out []Request
	for _, group := range rule.APIGroups {
		for _, resource := range rule.Resources {
			name, sub, _ := strings.Cut(resource, "/")
			for _, op := range operations {
				r := Request{Resource: schema.GroupVersionResource{Group: group, Version: version, Resource: name}, SubResource: sub,
					Operation: op, Name: "example", User: DefaultSchedulerUser}
				if group == v1alpha1.GroupName {
					r.Resource = v1alpha1.ResourcePools
					r.Resource.Resource = name
				}
				if !slices.Contains(clusterScoped, name) {
					r.Namespace = namespace
				}
				if len(rule.Namespaces) > 0 {
					r.Namespace = rule.Namespaces[0]
				}
				if len(rule.ObjectNames) > 0 {
					r.Name = rule.ObjectNames[0]
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// clusterScoped are the resources of schedulerWrites without a namespace.
var clusterScoped = []string{"devicetaintrules", "resourcepools", "tokenreviews", "subjectaccessreviews", "persistentvolumes"}
