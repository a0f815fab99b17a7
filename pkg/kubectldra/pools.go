package kubectldra

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned/scheme"
)

const poolsExample = `  # Every pool, one row each
  kubectl dra pools

  # The pools of one driver on one node, with slice counts and validity
  kubectl dra pools --driver gpu.example.com --node node-1 -o wide

  # As ResourcePool objects (drascope.dev/v1alpha1)
  kubectl dra pools -o yaml`

// poolsOptions are the flags and state of kubectl dra pools.
type poolsOptions struct {
	configFlags *genericclioptions.ConfigFlags
	printFlags  *genericclioptions.PrintFlags
	genericiooptions.IOStreams
	driver, node string
	now          func() time.Time

	source *poolSource
	// printer writes -o json|yaml|name|...; nil for the table (-o wide or
	// no -o).
	printer printers.ResourcePrinter
	wide    bool
}

func newPoolsCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &poolsOptions{
		configFlags: configFlags,
		printFlags:  genericclioptions.NewPrintFlags("").WithTypeSetter(scheme.Scheme),
		IOStreams:   streams,
		now:         time.Now,
	}
	cmd := &cobra.Command{
		Use:     "pools [--driver DRIVER] [--node NODE] [-o wide|json|yaml]",
		Short:   "List DRA pools with their device counts",
		Example: poolsExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.driver, "driver", "", "Only pools of this DRA driver.")
	cmd.Flags().StringVar(&o.node, "node", "", "Only pools of devices local to this node.")
	addOutputFlags(cmd, o.printFlags)
	return cmd
}

// addOutputFlags adds -o (and its template flags) as kubectl get has it,
// with wide, the table with more columns.
func addOutputFlags(cmd *cobra.Command, printFlags *genericclioptions.PrintFlags) {
	printFlags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format: wide (the table with more columns), or one of " + strings.Join(printFlags.AllowedFormats(), ", ") + "."
}

// Complete builds the pool source and the printer from the flags.
func (o *poolsOptions) Complete() error {
	var err error
	if o.source, err = newPoolSource(o.configFlags, o.now()); err != nil {
		return err
	}
	switch *o.printFlags.OutputFormat {
	case "":
	case "wide":
		o.wide = true
	default:
		o.printer, err = o.printFlags.ToPrinter()
		if genericclioptions.IsNoCompatiblePrinterError(err) {
			return fmt.Errorf("unknown output format %q: use wide, or one of %s", *o.printFlags.OutputFormat, strings.Join(o.printFlags.AllowedFormats(), ", "))
		}
		return err
	}
	return nil
}

// Validate has nothing to check that Complete did not: every flag
// combination is a valid filter.
func (o *poolsOptions) Validate() error { return nil }

// Run lists the pools: the notes on where they came from go to standard
// error, the pools to standard output.
func (o *poolsOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	pools, notes, err := o.source.List(ctx, poolFilter{driver: o.driver, node: o.node})
	if err != nil {
		return err
	}
	for _, note := range notes {
		fmt.Fprintln(o.ErrOut, note)
	}
	if o.printer != nil {
		return o.printer.PrintObj(poolList(pools), o.Out)
	}
	if len(pools) == 0 {
		fmt.Fprintln(o.ErrOut, "No pools found.")
		return nil
	}
	return printPoolTable(o.Out, pools, o.wide, o.now())
}

// poolList is pools as the list kubectl get -o yaml prints: every item
// with its apiVersion and kind.
func poolList(pools []v1alpha1.ResourcePool) *v1alpha1.ResourcePoolList {
	list := &v1alpha1.ResourcePoolList{Items: pools}
	if list.Items == nil {
		list.Items = []v1alpha1.ResourcePool{}
	}
	for i := range list.Items {
		list.Items[i].TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ResourcePool"}
	}
	return list
}
