package kubectldra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned/scheme"
)

const poolsExample = `  # Every pool, one row each
  kubectl dra pools

  # The pools of one driver on one node, with slice counts and validity
  kubectl dra pools --driver gpu.example.com --node node-1 -o wide

  # As ResourcePool objects (drascope.dev/v1alpha1)
  kubectl dra pools -o yaml

  # How many nodes could take an 8-GPU pod right now
  kubectl dra pools --driver gpu.example.com --fit 8

  # The table, then a row each time a pool's counts change (Ctrl-C stops)
  kubectl dra pools --node node-1 --watch`

// poolsOptions are the flags and state of kubectl dra pools.
type poolsOptions struct {
	configFlags *genericclioptions.ConfigFlags
	printFlags  *genericclioptions.PrintFlags
	genericiooptions.IOStreams
	driver, node string
	// fit, when positive, adds a line saying which nodes have at least
	// that many devices available.
	fit int
	// watch prints a row each time a pool's counts change, after the table.
	watch bool
	now   func() time.Time

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
		Use:     "pools [--driver DRIVER] [--node NODE] [--fit N] [-w] [-o wide|json|yaml]",
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
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "After the table, watch the pools and print a row each time one's counts change, as kubectl get --watch does. Changes are seen through a watch on ResourcePools, and on ResourceSlices and ResourceClaims when the pools are computed from them; each row is what kubectl dra pools would print then.")
	cmd.Flags().IntVar(&o.fit, "fit", 0, "After the table, say which nodes have at least this many available devices in their node-local pools (of --driver, if given): where a pod asking for that many could go now. The partitions of a partitionable GPU count one each.")
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

// Validate refuses --fit where there is no table to add its line to.
func (o *poolsOptions) Validate() error {
	if o.fit < 0 {
		return fmt.Errorf("--fit %d: want a number of devices, at least 1", o.fit)
	}
	if o.fit > 0 && o.printer != nil {
		return fmt.Errorf("--fit adds a line to the table; it does not combine with -o %s", *o.printFlags.OutputFormat)
	}
	if o.watch && o.printer != nil {
		return fmt.Errorf("--watch prints table rows; it does not combine with -o %s", *o.printFlags.OutputFormat)
	}
	return nil
}

// Run lists the pools: the notes on where they came from go to standard
// error, the pools to standard output.
func (o *poolsOptions) Run(ctx context.Context) error {
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
	} else if err := printPoolTable(o.Out, pools, o.wide, o.now()); err != nil {
		return err
	}
	if o.fit > 0 && len(pools) > 0 {
		fmt.Fprintln(o.Out)
		fmt.Fprintln(o.Out, fitLine(pools, o.fit))
	}
	if o.watch {
		return o.watchPools(ctx, pools, o.source.listComputed)
	}
	return nil
}

// watchCoalesce is how long --watch waits after a change for more before
// listing the pools again: a scheduling burst changes many objects at once.
const watchCoalesce = 300 * time.Millisecond

// watchPools prints a row for each pool that appears or whose row changes,
// until ctx ends. Watches on the objects pools are made of say when to look
// (the slices and claims too when the pools were computed from them); the
// pools are then listed as at the start, so a row says what the table would.
func (o *poolsOptions) watchPools(ctx context.Context, shown []v1alpha1.ResourcePool, computed bool) error {
	last := map[string]string{}
	for i := range shown {
		last[shown[i].Name] = rowKey(&shown[i])
	}
	changed := make(chan struct{}, 1)
	o.source.Watch(ctx, computed, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watchCoalesce):
		}
		select {
		case <-changed:
		default:
		}
		o.source.Refresh()
		pools, _, err := o.source.List(ctx, poolFilter{driver: o.driver, node: o.node})
		if err != nil {
			fmt.Fprintln(o.ErrOut, err)
			continue
		}
		var rows []v1alpha1.ResourcePool
		for i := range pools {
			if key := rowKey(&pools[i]); last[pools[i].Name] != key {
				last[pools[i].Name] = key
				rows = append(rows, pools[i])
			}
		}
		if len(rows) > 0 {
			if err := printPoolRows(o.Out, rows, o.wide, o.now()); err != nil {
				return err
			}
		}
	}
}

// maxNodesNamed bounds how many nodes the --fit line names.
const maxNodesNamed = 10

// fitLine says how many nodes have at least n available devices in their
// node-local pools, and names the first of them.
func fitLine(pools []v1alpha1.ResourcePool, n int) string {
	available := map[string]int{}
	for _, rp := range pools {
		if rp.Spec.NodeName == "" {
			continue
		}
		available[rp.Spec.NodeName] += int(summaryOf(&rp).AvailableDevices)
	}
	var fit []string
	for node, free := range available {
		if free >= n {
			fit = append(fit, node)
		}
	}
	slices.Sort(fit)
	line := fmt.Sprintf("%d of %d nodes have %d or more available devices", len(fit), len(available), n)
	if len(fit) == 0 {
		return line
	}
	named := fit[:min(len(fit), maxNodesNamed)]
	line += ": " + strings.Join(named, ", ")
	if len(fit) > len(named) {
		line += fmt.Sprintf(", and %d more", len(fit)-len(named))
	}
	return line
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
