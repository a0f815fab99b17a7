// Package manifests gives programs the shipped manifests, so that what they
// install is exactly what a cluster operator applies.
package manifests

import "embed"

// Files holds the CRDs and the scheduler configurations.
//
//go:embed crds/resourcepools.drascope.dev.yaml scheduler/config.yaml
var Files embed.FS
