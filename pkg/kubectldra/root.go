// Package kubectldra implements `kubectl dra`: pool availability from
// drascope's ResourcePool objects, or computed client side with pkg/drausage
// when there are none.
package kubectldra

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// NewCommand returns the `kubectl dra` command tree.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use: "kubectl-dra",
		// As kubectl runs it: usage lines read "kubectl dra pools".
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl dra"},
		Short:       "Show what DRA device pools have left, and what slows their scheduler",
		Long: `kubectl dra shows the availability of Dynamic Resource Allocation device
pools: how many devices each pool has, how many claims hold, and how many are
free or unable to take an allocation. It reads the ResourcePool objects that
drascope-scheduler publishes; without them it computes the same numbers from
ResourceSlices and ResourceClaims, within what you may read.

"kubectl dra health clear" puts a device drascope-scheduler holds Unhealthy
back into service, as an operator's audited action.

"kubectl dra webhooks" finds the admission webhooks that sit in the
scheduler's write path and keeps them out of it with matchConditions.`,
		SilenceUsage: true,
	}
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	configFlags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newPoolsCommand(configFlags, streams), newDescribeCommand(configFlags, streams), newHealthCommand(configFlags, streams), newWebhooksCommand(configFlags, streams), newVersionCommand(streams))
	return cmd
}

// clients builds the API clients the commands use from the kubectl flags.
func clients(configFlags *genericclioptions.ConfigFlags) (versioned.Interface, kubernetes.Interface, error) {
	config, err := configFlags.ToRESTConfig()
	if err != nil {
		return nil, nil, err
	}
	pools, err := versioned.NewForConfig(config)
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, nil, err
	}
	return pools, client, nil
}

// newPoolSource is the pool source of a command, from the kubectl flags.
func newPoolSource(configFlags *genericclioptions.ConfigFlags, now time.Time) (*poolSource, error) {
	pools, client, err := clients(configFlags)
	if err != nil {
		return nil, err
	}
	namespace, _, err := configFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	return &poolSource{pools: pools, client: client, namespace: namespace, now: now}, nil
}
