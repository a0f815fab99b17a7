// Package monitoring works with the Prometheus rules of manifests/monitoring:
// it scrapes drascope-scheduler's /metrics and runs the rules over what it
// exported, with drascope-alerts (promtool test rules' evaluation in a
// small binary of hack/prometheus), to tell which alerts fire (the sandbox's alert
// step and the integration tests). Its tests keep the generated files of
// manifests/monitoring current: the names of every metric drascope and
// kube-scheduler register (metric-names.txt, from the registry's
// descriptors), which the test of hack/prometheus checks the rules and the
// dashboard against, and the PrometheusRule made from rules.yaml.
package monitoring
