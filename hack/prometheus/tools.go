//go:build tools

// Package tools pins promtool, which checks and unit-tests the Prometheus
// rules of manifests/monitoring. The module also holds the test that parses
// every PromQL expression of the rules and the dashboard (promql_test.go),
// and drascope-alerts (alerteval, cmd/drascope-alerts): promtool test rules'
// evaluation without promtool's service discovery, for the sandbox.
// It is a module of its own so that Prometheus' dependencies never move the
// Kubernetes build.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
