// Package manifests gives programs the shipped manifests, so that what they
// install is exactly what a cluster operator applies.
package manifests

import "embed"

// Files holds the CRDs, the scheduler configurations, the sandbox demo's
// manifests (examples/demo) and the Prometheus rules (monitoring).
//
//go:embed crds/resourcepools.drascope.dev.yaml crds/devicequotas.drascope.dev.yaml scheduler/config.yaml examples/demo/*/*.yaml monitoring/rules.yaml
var Files embed.FS
