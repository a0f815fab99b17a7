//go:build tools

// Package tools pins KWOK (sigs.k8s.io/kwok), which drascope-sandbox runs to
// keep its simulated nodes Ready and their pods Running. It is a module of
// its own so that KWOK's dependencies (another Kubernetes minor version)
// never mix with drascope's; `make tools` builds bin/kwok from it and
// collects KWOK's stage files into bin/kwok-stages.yaml.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
