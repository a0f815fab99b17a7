// Package manifests gives programs the shipped manifests, so that what they
// install is exactly what a cluster operator applies.
package manifests

import "embed"

// Files holds the CRDs, the scheduler configurations and the sandbox demo's
// manifests (examples/demo).
//
//go:embed crds/resourcepools.drascope.dev.yaml scheduler/config.yaml examples/demo/*.yaml
var Files embed.FS
