package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is the internal version of the kube-scheduler config
// group, which DRAScopeArgs joins.
var SchemeGroupVersion = schedconfig.SchemeGroupVersion

var (
	// SchemeBuilder registers the internal DRAScope types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers the internal DRAScope types into a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	// The kube-scheduler converts plugin args through a scheme that it builds
	// lazily from its own SchemeBuilder; registering there makes that scheme
	// know DRAScopeArgs too.
	schedconfig.SchemeBuilder.Register(addKnownTypes)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &DRAScopeArgs{})
	return nil
}
