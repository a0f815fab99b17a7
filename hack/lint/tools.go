//go:build tools

// Package tools pins the linters `make verify` runs: staticcheck and
// goimports. They have a module of their own so that their golang.org/x/tools
// never moves the Kubernetes build.
package tools

import (
	_ "golang.org/x/tools/cmd/goimports"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
