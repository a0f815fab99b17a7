// Package adminaccess holds DRAScope's side of KEP-5018 (DRA admin access)
// that knows nothing of the scheduler framework: which claims ask for
// admin access, whether this scheduler may grant it (the DRAAdminAccess
// gate and the namespace label the apiserver checks), and the workaround
// that keeps upstream's allocator from charging shared counters to
// admin-access requests (counters.go).
package adminaccess

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// LabelValue is the value the apiserver requires for
// resourceapi.DRAAdminNamespaceLabelKey.
const LabelValue = "true"

// HasLabel reports whether the namespace carries the admin-access label.
func HasLabel(ns *v1.Namespace) bool {
	return ns.Labels[resourceapi.DRAAdminNamespaceLabelKey] == LabelValue
}

// NewlyLabelled returns the namespace of an informer event when it has just
// gained the admin-access label (added with it, or updated to it).
func NewlyLabelled(oldObj, newObj any) (*v1.Namespace, bool) {
	ns, ok := newObj.(*v1.Namespace)
	if !ok || !HasLabel(ns) {
		return nil, false
	}
	if old, ok := oldObj.(*v1.Namespace); ok && HasLabel(old) {
		return nil, false
	}
	return ns, true
}

// FirstRequest returns the name of the first request of claim that asks for
// admin access, or "". Only exact requests can: the API has no admin access
// on prioritized-list subrequests.
func FirstRequest(claim *resourceapi.ResourceClaim) string {
	for _, request := range claim.Spec.Devices.Requests {
		if request.Exactly != nil && ptr.Deref(request.Exactly.AdminAccess, false) {
			return request.Name
		}
	}
	return ""
}

// Guard says whether this scheduler may grant admin access.
type Guard struct {
	// Enabled is the DRAAdminAccess feature gate.
	Enabled bool
	// RequireNamespaceLabel refuses admin access in namespaces without
	// the label (DRAScopeArgs adminAccess.requireNamespaceLabel), read
	// through Namespaces.
	RequireNamespaceLabel bool
	Namespaces            corelisters.NamespaceLister
}

// Refusal is why a claim's admin access is refused.
type Refusal struct {
	Claim   *resourceapi.ResourceClaim
	Request string
	// Reason is short, for logs; Message names the claim, the request
	// and what to do, for the pod's status.
	Reason, Message string
}

// Check returns the refusal of the first claim still to allocate that asks
// for admin access this scheduler must not grant: the gate is off, or
// (with RequireNamespaceLabel) the claim's namespace lacks the label; nil
// when every one may have it. Allocated claims are not passed: the guard
// is about handing out new access, not about taking it away.
func (g Guard) Check(toAllocate []*resourceapi.ResourceClaim) *Refusal {
	if g.Enabled && !g.RequireNamespaceLabel {
		return nil
	}
	for _, claim := range toAllocate {
		request := FirstRequest(claim)
		if request == "" {
			continue
		}
		if !g.Enabled {
			return &Refusal{Claim: claim, Request: request, Reason: "feature gate DRAAdminAccess disabled",
				Message: fmt.Sprintf("claim %s, request %s: admin access is requested, but the DRAAdminAccess feature gate is disabled in this scheduler", klog.KObj(claim), request)}
		}
		if problem := g.namespaceProblem(claim.Namespace); problem != "" {
			return &Refusal{Claim: claim, Request: request, Reason: problem,
				Message: fmt.Sprintf("claim %s, request %s: admin access %s", klog.KObj(claim), request, problem)}
		}
	}
	return nil
}

// namespaceProblem says what is wrong with the namespace for admin access,
// or "" when it carries the label.
func (g Guard) namespaceProblem(namespace string) string {
	ns, err := g.Namespaces.Get(namespace)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("requires namespace %s, which the scheduler has not seen yet", namespace)
	case err != nil:
		return fmt.Sprintf("cannot be checked: reading namespace %s: %v", namespace, err)
	case !HasLabel(ns):
		return fmt.Sprintf("requires the label %s=%q on namespace %s (kubectl label namespace %s %s=%s)",
			resourceapi.DRAAdminNamespaceLabelKey, LabelValue, namespace,
			namespace, resourceapi.DRAAdminNamespaceLabelKey, LabelValue)
	}
	return ""
}
