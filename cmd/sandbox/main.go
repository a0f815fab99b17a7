// Command drascope-sandbox runs the whole product on a local control plane
// with simulated nodes and a simulated DRA driver, walks through a demo, and
// stays up to be explored. `make sandbox` builds what it needs and runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/internal/sandbox"
)

func main() {
	opts := sandbox.Options{Out: os.Stdout}
	fs := pflag.NewFlagSet("drascope-sandbox", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, `drascope-sandbox starts, on 127.0.0.1 only, etcd, kube-apiserver and
kube-controller-manager (k8s.io/kubernetes v1.37.2), drascope-scheduler with
the shipped config and CRD, simulated nodes that play kubelet's part, and a
simulated DRA driver; walks through a demo of drascope's features, each step
checked; and stays up until Ctrl-C, which stops everything it started.

Usage: drascope-sandbox [flags]   (or: make sandbox)

`)
		fs.PrintDefaults()
	}
	exe, _ := os.Executable()
	fs.StringVar(&opts.BinDir, "bin-dir", filepath.Dir(exe), "Directory with etcd, kube-apiserver, kube-controller-manager and drascope-scheduler (make build tools).")
	fs.IntVar(&opts.Nodes, "nodes", 4, "Simulated nodes (at least 3).")
	fs.IntVar(&opts.DevicesPerNode, "devices-per-node", 8, "GPUs per node, besides two partitionable GPUs (at least 4).")
	fs.BoolVar(&opts.Demo, "demo", true, "Walk through the demo once everything is up (--no-demo or --demo=false to skip).")
	noDemo := fs.Bool("no-demo", false, "Skip the demo.")
	fs.BoolVar(&opts.ExitAfterDemo, "exit-after-demo", false, "Stop after the demo instead of staying up (for tests).")
	fs.IntVar(&opts.Port, "port", 6443, "kube-apiserver port on 127.0.0.1; 0 picks a free one.")
	fs.BoolVar(&opts.KeepData, "keep-data", false, "Keep etcd's data, the logs and the kubeconfig after stopping.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *noDemo {
		opts.Demo = false
	}
	klog.InitFlags(nil)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sandbox.Run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "drascope-sandbox: %v\n", err)
		os.Exit(1)
	}
}
