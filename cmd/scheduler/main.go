// Command drascope-scheduler is kube-scheduler with the DRAScope plugin
// registered. Every kube-scheduler flag and config field works as upstream.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/plugins/drascope"
)

func main() {
	// One runtime for the scheduler this command runs: every DRAScope
	// profile shares its side cache, health cache and publisher.
	rt := draruntime.New()
	command := app.NewSchedulerCommand(app.WithPlugin(drascope.Name, drascope.Factory(rt)))
	os.Exit(cli.Run(command))
}
