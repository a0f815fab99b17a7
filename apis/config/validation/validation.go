// Package validation checks DRAScope plugin args.
package validation

import (
	"errors"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/apis/config"
)

// ValidateDRAScopeArgs returns every problem with args, each with its field
// path under path. The timeouts are checked by upstream's own validation of
// DynamicResources args, because they are handed to that plugin unchanged and
// their rules depend on feature gates.
func ValidateDRAScopeArgs(path *field.Path, args *config.DRAScopeArgs, fts feature.Features) field.ErrorList {
	var allErrs field.ErrorList
	upstream := &schedconfig.DynamicResourcesArgs{
		FilterTimeout:  args.FilterTimeout,
		BindingTimeout: args.BindingTimeout,
	}
	if args.PoolStatus.MinPublishInterval.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(path.Child("poolStatus", "minPublishInterval"),
			args.PoolStatus.MinPublishInterval.Duration.String(), "must be positive"))
	}
	if args.PoolStatus.MaxWritesPerSecond < 1 {
		allErrs = append(allErrs, field.Invalid(path.Child("poolStatus", "maxWritesPerSecond"),
			args.PoolStatus.MaxWritesPerSecond, "must be at least 1"))
	}
	switch args.DeviceHealth.Policy {
	case config.DeviceHealthAvoid, config.DeviceHealthIgnore:
	default:
		allErrs = append(allErrs, field.NotSupported(path.Child("deviceHealth", "policy"),
			args.DeviceHealth.Policy, []config.DeviceHealthPolicy{config.DeviceHealthAvoid, config.DeviceHealthIgnore}))
	}
	if args.DeviceHealth.UnhealthyHoldTime.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(path.Child("deviceHealth", "unhealthyHoldTime"),
			args.DeviceHealth.UnhealthyHoldTime.Duration.String(), "must be positive"))
	}
	err := schedvalidation.ValidateDynamicResourcesArgs(path, upstream, fts)
	if err == nil {
		return allErrs
	}
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		return append(allErrs, field.InternalError(path, err))
	}
	for _, e := range agg.Errors() {
		var fe *field.Error
		if errors.As(e, &fe) {
			allErrs = append(allErrs, fe)
		} else {
			allErrs = append(allErrs, field.InternalError(path, e))
		}
	}
	return allErrs
}
