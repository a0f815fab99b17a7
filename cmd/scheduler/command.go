package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/plugins/drascope"
	"github.com/drascope/drascope/pkg/plugins/drascopepreemption"
)

// newCommand is app.NewSchedulerCommand with one step added between
// app.Setup and app.Run: the DRAScope runtime follows the scheduler's
// leader election (draruntime.Leadership), which upstream's command keeps
// to itself. It is built from the same upstream pieces in the same order,
// so flags, --help, logging and feature gates are kube-scheduler's;
// TestCommandMatchesUpstream checks that every upstream flag is here.
func newCommand() *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use: "drascope-scheduler",
		Long: `drascope-scheduler is kube-scheduler with the DRAScope plugin registered: a
variant of the in-tree DynamicResources plugin that withholds devices kubelet
reports Unhealthy, publishes ResourcePool objects and guards admin access.
Every kube-scheduler flag and configuration field works as upstream; DRAScope
is configured in a profile's pluginConfig. See
https://kubernetes.io/docs/reference/command-line-tools-reference/kube-scheduler/
for the flags.`,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Feature gates must be set before RunE.
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, opts)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				if len(arg) > 0 {
					return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
	}
	nfs := opts.Flags
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range nfs.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, *nfs, cols)
	if err := cmd.MarkFlagFilename("config", "yaml", "yml", "json"); err != nil {
		klog.Background().Error(err, "Failed to mark flag filename")
	}
	return cmd
}

// run is upstream's runCommand, with the runtime made first and told
// about leader election before app.Run starts it.
func run(cmd *cobra.Command, opts *options.Options) error {
	verflag.PrintAndExitIfRequested()
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	cliflag.PrintFlags(cmd.Flags())
	if opts.InformerName == nil {
		name, err := cache.NewInformerName("kube-scheduler")
		if err != nil {
			return err
		}
		opts.InformerName = name
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	// One runtime for the scheduler this command runs: every DRAScope
	// profile shares its side cache, health cache and publisher.
	leadership := draruntime.NewLeadership()
	rt := draruntime.New(draruntime.WithLeadership(leadership))
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(drascope.Name, drascope.Factory(rt)), app.WithPlugin(drascopepreemption.Name, drascopepreemption.New))
	if err != nil {
		return err
	}
	leadership.Follow(cc.LeaderElection)
	fg.(featuregate.MutableFeatureGate).AddMetrics()
	opts.ComponentGlobalsRegistry.AddMetrics()
	return app.Run(ctx, cc, sched)
}
