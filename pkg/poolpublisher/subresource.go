package poolpublisher

// Whether the ResourcePool CRD has a status subresource. The current
// manifests' CRD has none, so an object is created with its status in one
// request; one applied from older manifests has, and its apiserver drops
// the status on create and keeps it on update of the object. Discovery
// says which at the start of a term; a write that finds the other
// (a status dropped on create, an update that changed nothing, a status
// subresource not found) asks again.

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// learnStatusSubresource asks discovery whether the CRD serves
// resourcepools/status, records the answer for the term, says so when it
// is news, and returns it. When discovery fails, the term keeps what it
// believed.
func (p *Publisher) learnStatusSubresource(ctx context.Context, t *term) bool {
	found, err := p.hasStatusSubresource()
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		logger.Error(err, "Asking discovery whether the ResourcePool CRD has a status subresource; writing as before", "statusSubresource", t.statusApart)
		return t.statusApart
	}
	switch {
	case found && (!t.statusKnown || !t.statusApart):
		logger.Info("The ResourcePool CRD has a status subresource (applied from older manifests): writing each status in a request of its own, so a new pool takes two. Apply manifests/crds to create a pool's object in one request")
	case !found && t.statusKnown && t.statusApart:
		logger.Info("The ResourcePool CRD has no status subresource now: writing whole objects")
	}
	t.statusApart, t.statusKnown = found, true
	return found
}

// hasStatusSubresource says whether discovery lists resourcepools/status.
// A group version not served (the CRD gone, or a fake server) has none.
func (p *Publisher) hasStatusSubresource() (bool, error) {
	list, err := p.client.Discovery().ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool {
		return r.Name == v1alpha1.ResourcePools.Resource+"/status"
	}), nil
}
