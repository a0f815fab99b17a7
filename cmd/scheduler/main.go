// Command drascope-scheduler is kube-scheduler with the DRAScope plugin
// registered. Every kube-scheduler flag and config field works as upstream.
package main

import (
	"os"

	"k8s.io/component-base/cli"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}
