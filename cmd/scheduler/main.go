// Command drascope-scheduler is kube-scheduler with the DRAScope plugin
// registered. Every kube-scheduler flag and config field works as upstream.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	// client-go's workqueue metrics (workqueue_depth{name="resourcepool"}
	// for the ResourcePool publisher, as KEP-5677 names it), which
	// kube-controller-manager installs and kube-scheduler does not.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}
