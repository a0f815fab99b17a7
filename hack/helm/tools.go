//go:build tools

// Package tools pins helm, which lints and renders charts/drascope. The
// module also holds the test that keeps the chart's rendered objects equal
// to the kustomize output of manifests/ for the same mode (chart_test.go).
// It is a module of its own so that Helm's dependencies never move the
// Kubernetes build.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
