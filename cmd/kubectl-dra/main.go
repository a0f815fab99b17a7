// Command kubectl-dra is the `kubectl dra` plugin: DRA pool availability a
// person can read, within their RBAC. Put it on PATH and run `kubectl dra`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/drascope/drascope/pkg/kubectldra"
)

func main() {
	cmd := kubectldra.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
