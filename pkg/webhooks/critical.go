package webhooks

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
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

// SchedulerCriticalRules exclude the writes drascope-scheduler, as user,
// makes for every DRA pod it places, and its background writes, from a
// webhook; the same writes by anyone else still reach it:
// pod bindings, claim status (allocation and reservation; with granular
// status authorization the apiserver checks resourceclaims/binding, but
// the request is still an update of resourceclaims/status), its leader
// election lease, events, and ResourcePool objects. manifests/examples/
// webhook-exclusions.yaml is the same set, commented.
func SchedulerCriticalRules(user string) []ExclusionRule {
	rules := []ExclusionRule{
		{
			APIGroups: []string{""}, APIVersions: []string{"v1"},
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Resources:  []string{"pods/binding"},
		},
		{
			APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"},
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
			Resources:  []string{"resourceclaims/status"},
		},
		{
			APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"},
			Operations:  []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Resources:   []string{"leases"},
			Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			Namespaces:  []string{schedulerLeaseNamespace},
			ObjectNames: []string{schedulerLease},
		},
		{
			APIGroups: []string{"", "events.k8s.io"}, APIVersions: []string{"v1"},
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Resources:  []string{"events"},
		},
		{
			APIGroups: []string{v1alpha1.GroupName}, APIVersions: []string{"*"},
			Resources: []string{"resourcepools", "resourcepools/status"},
		},
	}
	for i := range rules {
		rules[i].Usernames = []string{user}
	}
	return rules
}

// SchedulerWrites are examples of the requests drascope-scheduler makes,
// for audit; namespaced ones are in namespace.
func SchedulerWrites(namespace string) []Request {
	core := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Version: "v1", Resource: resource}
	}
	pools := v1alpha1.ResourcePools
	leases := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	writes := []Request{
		{Resource: core("pods"), SubResource: "binding", Operation: admissionregistrationv1.Create, Namespace: namespace, Name: "pod"},
		{Resource: schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}, SubResource: "status",
			Operation: admissionregistrationv1.Update, Namespace: namespace, Name: "claim"},
		{Resource: leases, Operation: admissionregistrationv1.Update, Namespace: schedulerLeaseNamespace, Name: schedulerLease},
		{Resource: schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}, Operation: admissionregistrationv1.Create, Namespace: namespace, Name: "event"},
		{Resource: core("events"), Operation: admissionregistrationv1.Create, Namespace: namespace, Name: "event"},
		{Resource: pools, Operation: admissionregistrationv1.Create, Name: "resourcepool"},
		{Resource: pools, Operation: admissionregistrationv1.Update, Name: "resourcepool"},
		// Under a CRD from older manifests, with a status subresource.
		{Resource: pools, SubResource: "status", Operation: admissionregistrationv1.Update, Name: "resourcepool"},
		// Pools that are gone, and second objects for one pool.
		{Resource: pools, Operation: admissionregistrationv1.Delete, Name: "resourcepool"},
		// A lease is created by the first replica that ever takes it.
		{Resource: leases, Operation: admissionregistrationv1.Create, Namespace: schedulerLeaseNamespace, Name: schedulerLease},
	}
	for i := range writes {
		writes[i].User = DefaultSchedulerUser
	}
	return writes
}
