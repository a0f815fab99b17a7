package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1, the version users write.
var SchemeGroupVersion = schedconfigv1.SchemeGroupVersion

var (
	// SchemeBuilder registers the v1 DRAScope types with their defaulting and
	// conversion functions.
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme registers the v1 DRAScope types into a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// See the comment in the internal package: the kube-scheduler's lazily
	// built plugin-args scheme comes from its own SchemeBuilder.
	schedconfigv1.SchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, RegisterConversions)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &DRAScopeArgs{})
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}
