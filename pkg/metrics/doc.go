// Package metrics is every metric drascope-scheduler adds to its /metrics
// (k8s.io/component-base/metrics, legacy registry): pool availability and
// the ResourcePool publisher (pools.go), and how device health reports are
// treated (health.go). Names follow one rule: KEP-5677's
// resourcepool_controller_* where the KEP names the metric, drascope_*
// otherwise. They are listed in docs/metrics.md, and
// internal/monitoring checks every name the shipped rules and dashboard use
// against what Register registers.
//
// The per-pool gauges read a process-wide source (Export): the legacy
// registry is process-wide, so one scheduler's pools are shown at a time.
package metrics
