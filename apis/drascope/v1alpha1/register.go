package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is drascope's API group.
const GroupName = "drascope.dev"

// SchemeGroupVersion is drascope.dev/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// The resources of this version.
var (
	ResourcePools = SchemeGroupVersion.WithResource("resourcepools")
	DeviceQuotas  = SchemeGroupVersion.WithResource("devicequotas")
)

// Resource takes an unqualified resource and returns a group-qualified
// GroupResource, as the generated listers expect of an API package.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the types of drascope.dev/v1alpha1.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the types of drascope.dev/v1alpha1 into a
	// scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &ResourcePool{}, &ResourcePoolList{}, &DeviceQuota{}, &DeviceQuotaList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
