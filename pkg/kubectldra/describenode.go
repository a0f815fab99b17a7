package kubectldra

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

const describeNodeExample = `  # The DRA pools of a node, with their counts
  kubectl dra describe node node-1

  # ... and every device with its state and claims
  kubectl dra describe node node-1 --show-devices`

// describeNodeOptions are the flags and state of kubectl dra describe node.
type describeNodeOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	node        string
	showDevices bool
	now         func() time.Time

	source *poolSource
}

func newDescribeNodeCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &describeNodeOptions{configFlags: configFlags, IOStreams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:     "node NODE [--show-devices]",
		Short:   "Show the DRA pools of a node: where there is room",
		Example: describeNodeExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.showDevices, "show-devices", false, "List each pool's devices with their state and claims.")
	return cmd
}

// Complete takes the node from the arguments and builds the source.
func (o *describeNodeOptions) Complete(args []string) error {
	o.node = args[0]
	var err error
	o.source, err = newPoolSource(o.configFlags, o.now())
	return err
}

// Run describes the node's pools. An unknown node is an error; a node one
// may not read is not.
func (o *describeNodeOptions) Run(ctx context.Context) error {
	if _, err := o.source.client.CoreV1().Nodes().Get(ctx, o.node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %q not found", o.node)
	} else if err != nil && !apierrors.IsForbidden(err) {
		return fmt.Errorf("reading node %s: %w", o.node, err)
	}
	pools, notes, err := o.source.List(ctx, poolFilter{node: o.node})
	if err != nil {
		return err
	}
	var details []pooledDetail
	if o.showDevices {
		for i := range pools {
			detail, note, err := o.source.Detail(ctx, &pools[i])
			if err != nil {
				return err
			}
			details = append(details, pooledDetail{detail: detail, note: note})
		}
	}
	for _, note := range notes {
		fmt.Fprintln(o.ErrOut, note)
	}
	return printNode(o.Out, o.node, pools, details)
}
