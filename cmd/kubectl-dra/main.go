// Command kubectl-dra is the `kubectl dra` plugin: DRA pool availability a
// person can read, within their RBAC. Put it on PATH and run `kubectl dra`.
package main

import (
	"context"
	"os"
	"os/signal"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/drascope/drascope/pkg/kubectldra"
)

func main() {
	// Ctrl-C ends a watch (pools -w) or a wait (health clear --wait) through
	// the commands' context.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cmd := kubectldra.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.ExecuteContext(ctx); err != nil {
		stop()
		os.Exit(1)
	}
}
