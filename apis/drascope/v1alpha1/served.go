package v1alpha1

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// IsNotServed reports whether an error from listing ResourcePools means the
// API is not served: the CRD (manifests/crds) is not installed. A served
// collection never answers NotFound to a list.
func IsNotServed(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}
