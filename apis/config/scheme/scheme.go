// Package scheme registers the DRAScope args into the kube-scheduler's own
// scheme, so that `kube-scheduler --config` decodes, defaults and converts
// them like the args of an in-tree plugin. Import it for its side effect.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drascope/drascope/apis/config"
	configv1 "github.com/drascope/drascope/apis/config/v1"
)

func init() {
	AddToScheme(schedscheme.Scheme)
}

// AddToScheme registers the internal and v1 DRAScope args into scheme.
func AddToScheme(scheme *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(scheme))
	utilruntime.Must(configv1.AddToScheme(scheme))
}
