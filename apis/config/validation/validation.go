// Package validation checks DRAScope plugin args.
package validation

import (
	"errors"
	"fmt"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/apis/config"
)

// ArgsPath roots the field paths of DRAScope args errors where a person
// finds the args in a KubeSchedulerConfiguration: under the named profile,
// or, with no profile, under pluginConfig alone.
func ArgsPath(profile string) *field.Path {
	args := field.NewPath("pluginConfig").Key(config.PluginName).Child("args")
	if profile == "" {
		return args
	}
	return field.NewPath("profiles").Key(profile).Child("pluginConfig").Key(config.PluginName).Child("args")
}

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
	if args.PoolStatus.MaxCreationsPerSecond < 1 {
		allErrs = append(allErrs, field.Invalid(path.Child("poolStatus", "maxCreationsPerSecond"),
			args.PoolStatus.MaxCreationsPerSecond, "must be at least 1"))
	}
	if d := args.PoolStatus.MaxPublishDelay.Duration; d < 2*args.PoolStatus.MinPublishInterval.Duration {
		allErrs = append(allErrs, field.Invalid(path.Child("poolStatus", "maxPublishDelay"),
			d.String(), fmt.Sprintf("must be at least twice poolStatus.minPublishInterval (%v): a pool written at half of it must have been allowed to write", args.PoolStatus.MinPublishInterval.Duration)))
	}
	switch args.DeviceHealth.Policy {
	case "", config.DeviceHealthTaint, config.DeviceHealthAvoid, config.DeviceHealthIgnore:
	default:
		allErrs = append(allErrs, field.NotSupported(path.Child("deviceHealth", "policy"),
			args.DeviceHealth.Policy, []config.DeviceHealthPolicy{config.DeviceHealthTaint, config.DeviceHealthAvoid, config.DeviceHealthIgnore}))
	}
	if args.DeviceHealth.UnhealthyHoldTime.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(path.Child("deviceHealth", "unhealthyHoldTime"),
			args.DeviceHealth.UnhealthyHoldTime.Duration.String(), "must be positive"))
	}
	switch args.Scoring.Strategy {
	case config.ScoringNone, config.ScoringMostAllocated, config.ScoringLeastAllocated:
	default:
		allErrs = append(allErrs, field.NotSupported(path.Child("scoring", "strategy"),
			args.Scoring.Strategy, []config.ScoringStrategy{config.ScoringNone, config.ScoringMostAllocated, config.ScoringLeastAllocated}))
	}
	switch args.DeviceChoice {
	// Unset is FirstFit: defaulting sets it, and args built in code may not.
	case "", config.DeviceChoiceFirstFit, config.DeviceChoiceBestFit:
	default:
		allErrs = append(allErrs, field.NotSupported(path.Child("deviceChoice"),
			args.DeviceChoice, []config.DeviceChoice{config.DeviceChoiceFirstFit, config.DeviceChoiceBestFit}))
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

// schedulerWide are the DRAScope args that configure what one scheduler
// runs once for all its DRAScope profiles: the pool side cache and its
// ResourcePool publisher, and the device health cache, whose policy decides
// what the cluster-scoped ResourcePools count as unavailable. Each is read
// as a value that prints the way a person wrote it.
var schedulerWide = []struct {
	path  []string
	value func(*config.DRAScopeArgs) any
}{
	{[]string{"poolStatus", "publishResourcePools"}, func(a *config.DRAScopeArgs) any { return a.PoolStatus.PublishResourcePools }},
	{[]string{"poolStatus", "minPublishInterval"}, func(a *config.DRAScopeArgs) any { return a.PoolStatus.MinPublishInterval.Duration.String() }},
	{[]string{"poolStatus", "maxWritesPerSecond"}, func(a *config.DRAScopeArgs) any { return a.PoolStatus.MaxWritesPerSecond }},
	{[]string{"poolStatus", "maxCreationsPerSecond"}, func(a *config.DRAScopeArgs) any { return a.PoolStatus.MaxCreationsPerSecond }},
	{[]string{"poolStatus", "maxPublishDelay"}, func(a *config.DRAScopeArgs) any { return a.PoolStatus.MaxPublishDelay.Duration.String() }},
	{[]string{"deviceHealth", "policy"}, func(a *config.DRAScopeArgs) any { return string(a.DeviceHealth.Policy) }},
	{[]string{"deviceHealth", "unhealthyHoldTime"}, func(a *config.DRAScopeArgs) any { return a.DeviceHealth.UnhealthyHoldTime.Duration.String() }},
}

// ValidateSchedulerWideArgs checks that args (at path) set every
// scheduler-wide arg as first (at firstPath) does: the args of the DRAScope
// profile that started the scheduler's runtime. Each error names both field
// paths and both values, defaulted ones included, so that a person can see
// which profile to change.
func ValidateSchedulerWideArgs(firstPath *field.Path, first *config.DRAScopeArgs, path *field.Path, args *config.DRAScopeArgs) field.ErrorList {
	var allErrs field.ErrorList
	for _, arg := range schedulerWide {
		want, got := arg.value(first), arg.value(args)
		if want == got {
			continue
		}
		wantPath := firstPath.Child(arg.path[0], arg.path[1:]...)
		allErrs = append(allErrs, field.Invalid(path.Child(arg.path[0], arg.path[1:]...), got,
			fmt.Sprintf("differs from %s: %v; this arg is scheduler-wide (one side cache, health cache and ResourcePool publisher serve every profile), so every DRAScope profile must have the same value (a profile that leaves it out gets the default)", wantPath, want)))
	}
	return allErrs
}
