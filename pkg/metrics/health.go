package metrics

import (
	"k8s.io/component-base/metrics"
)

// How drascope treats device health reports: reports it did not believe,
// and the DeviceTaintRules it wrote.

var (
	// IgnoredReports: health reports not believed, by reason (NotHolder:
	// the pod does not hold the device; Unresolvable: the resource ID
	// names no known device).
	IgnoredReports = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_device_health_reports_ignored_total",
		Help:           "Device health reports in pod status that were not believed, by reason: NotHolder (the reporting pod holds no claim allocated that device) or Unresolvable (the resource ID names no known device).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	// RuleWrites: DeviceTaintRule writes by verb and result.
	RuleWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "drascope_device_taint_rule_writes_total",
		Help:           "DeviceTaintRule writes for Unhealthy devices (deviceHealth.policy Taint), by verb (create, update, delete) and result (success, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"verb", "result"})
)

// ObserveIgnored is a health.Options.OnIgnored function.
func ObserveIgnored(reason string) {
	IgnoredReports.WithLabelValues(reason).Inc()
}

// ObserveRuleWrite is a health.TaintWriter.ObserveWrite function.
func ObserveRuleWrite(verb string, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	RuleWrites.WithLabelValues(verb, result).Inc()
}
