package kubectldra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	"github.com/drascope/drascope/pkg/poolstatus"
)

const poolsExample = `  # Every pool, one row each
  kubectl dra pools

  # The pools of one driver on one node, with slice counts and validity
  kubectl dra pools --driver gpu.example.com --node node-1 -o wide

  # As ResourcePool objects (drascope.dev/v1alpha1)
  kubectl dra pools -o yaml`

type poolsOptions struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	driver      string
	node        string
	output      string
	now         func() time.Time
}

func newPoolsCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &poolsOptions{configFlags: configFlags, streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:     "pools [--driver DRIVER] [--node NODE] [-o wide|json|yaml]",
		Short:   "List DRA pools with their device counts",
		Example: poolsExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.driver, "driver", "", "Only pools of this DRA driver.")
	cmd.Flags().StringVar(&o.node, "node", "", "Only pools of devices local to this node.")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: wide, json or yaml.")
	return cmd
}

func (o *poolsOptions) run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	switch o.output {
	case "", "wide", "json", "yaml":
	default:
		return fmt.Errorf("unknown output format %q: use wide, json or yaml", o.output)
	}
	poolClient, client, err := clients(o.configFlags)
	if err != nil {
		return err
	}

	pools, err := listResourcePools(ctx, poolClient, poolFilter{driver: o.driver, node: o.node})
	var notes []string
	switch {
	case err == nil && len(pools) > 0:
	case err == nil || v1alpha1.IsNotServed(err) || apierrors.IsForbidden(err):
		why := "no ResourcePool objects found"
		switch {
		case apierrors.IsForbidden(err):
			why = "listing ResourcePools is not permitted"
		case err != nil:
			why = "the ResourcePool CRD is not installed"
		}
		pools, notes, err = computePools(ctx, client, o.driver, o.node, o.now())
		if err != nil {
			return err
		}
		notes = append([]string{fmt.Sprintf("(%s: computed from ResourceSlices and ResourceClaims)", why)}, notes...)
	default:
		return fmt.Errorf("listing ResourcePools: %w", err)
	}
	slices.SortFunc(pools, func(a, b v1alpha1.ResourcePool) int { return cmp.Compare(a.Name, b.Name) })

	for _, note := range notes {
		fmt.Fprintln(o.streams.ErrOut, note)
	}
	switch o.output {
	case "json", "yaml":
		return printList(o.output, pools, o.streams)
	}
	if len(pools) == 0 {
		fmt.Fprintln(o.streams.ErrOut, "No pools found.")
		return nil
	}
	return printPoolTable(pools, o.output == "wide", o.now(), o.streams)
}

// poolFilter selects ResourcePools by their selectable fields; empty fields
// select everything.
type poolFilter struct{ driver, pool, node string }

// listResourcePools reads ResourcePool objects, filtered on the server.
func listResourcePools(ctx context.Context, poolClient versioned.Interface, filter poolFilter) ([]v1alpha1.ResourcePool, error) {
	var selectors []fields.Selector
	for field, value := range map[string]string{"spec.driver": filter.driver, "spec.poolName": filter.pool, "spec.nodeName": filter.node} {
		if value != "" {
			selectors = append(selectors, fields.OneTermEqualSelector(field, value))
		}
	}
	list, err := poolClient.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(selectors...).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// computePools counts pools client side from what the user may read. It
// returns notes on what could not be read; missing permission is never an
// error.
func computePools(ctx context.Context, client kubernetes.Interface, driver, node string, now time.Time) ([]v1alpha1.ResourcePool, []string, error) {
	var notes []string
	sliceList, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return nil, []string{"(listing ResourceSlices is not permitted: no pools can be shown)"}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	claimList, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		notes = append(notes, "(listing ResourceClaims is not permitted: allocations are not counted)")
		claimList = nil
	case err != nil:
		return nil, nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	var opts drausage.Options
	if rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range rules.Items {
			opts.DeviceTaintRules = append(opts.DeviceTaintRules, &rules.Items[i])
		}
	} else if !apierrors.IsForbidden(err) && !v1alpha1.IsNotServed(err) {
		return nil, nil, fmt.Errorf("listing DeviceTaintRules: %w", err)
	}

	slicePointers := make([]*resourceapi.ResourceSlice, 0, len(sliceList.Items))
	for i := range sliceList.Items {
		s := &sliceList.Items[i]
		if driver != "" && s.Spec.Driver != driver {
			continue
		}
		slicePointers = append(slicePointers, s)
	}
	var claims []*resourceapi.ResourceClaim
	if claimList != nil {
		for i := range claimList.Items {
			claims = append(claims, &claimList.Items[i])
		}
	}
	var pools []v1alpha1.ResourcePool
	for _, usage := range drausage.ComputePoolUsage(slicePointers, claims, opts) {
		if node != "" && usage.NodeName != node {
			continue
		}
		name, ok := v1alpha1.PlainName(usage.Driver, usage.Pool)
		if !ok {
			name = v1alpha1.HashedName(usage.Driver, usage.Pool)
		}
		pools = append(pools, v1alpha1.ResourcePool{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ResourcePool"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.ResourcePoolSpec{Driver: usage.Driver, PoolName: usage.Pool, NodeName: usage.NodeName},
			Status:     *poolstatus.For(&usage, "", nil, now),
		})
	}
	return pools, notes, nil
}

func printPoolTable(pools []v1alpha1.ResourcePool, wide bool, now time.Time, streams genericiooptions.IOStreams) error {
	w := printers.GetNewTabWriter(streams.Out)
	columns := []string{"NAME", "DRIVER", "POOL", "NODE", "TOTAL", "ALLOCATED", "AVAILABLE", "UNAVAILABLE"}
	if wide {
		columns = append(columns, "PARTIAL", "SLICES", "VALID", "AGE")
	}
	fmt.Fprintln(w, strings.Join(columns, "\t"))
	for _, rp := range pools {
		sum := rp.Status.Summary
		if sum == nil {
			sum = &v1alpha1.PoolSummary{}
		}
		node := rp.Spec.NodeName
		if node == "" {
			node = "<none>"
		}
		row := []string{rp.Name, rp.Spec.Driver, rp.Spec.PoolName, node,
			fmt.Sprint(sum.TotalDevices), fmt.Sprint(sum.AllocatedDevices), fmt.Sprint(sum.AvailableDevices), fmt.Sprint(sum.UnavailableDevices)}
		if wide {
			valid := "Unknown"
			if c := meta.FindStatusCondition(rp.Status.Conditions, v1alpha1.ConditionValid); c != nil {
				valid = string(c.Status)
			}
			age := "<computed>"
			if !rp.CreationTimestamp.IsZero() {
				age = duration.HumanDuration(now.Sub(rp.CreationTimestamp.Time))
			}
			row = append(row, fmt.Sprint(sum.PartiallyAllocatedDevices),
				fmt.Sprintf("%d/%d", rp.Status.ObservedSliceCount, rp.Status.ExpectedSliceCount), valid, age)
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
	return w.Flush()
}

func printList(format string, pools []v1alpha1.ResourcePool, streams genericiooptions.IOStreams) error {
	list := &v1alpha1.ResourcePoolList{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ResourcePoolList"},
		Items:    pools,
	}
	for i := range list.Items {
		list.Items[i].APIVersion = v1alpha1.SchemeGroupVersion.String()
		list.Items[i].Kind = "ResourcePool"
	}
	var printer printers.ResourcePrinter = &printers.JSONPrinter{}
	if format == "yaml" {
		printer = &printers.YAMLPrinter{}
	}
	if err := printer.PrintObj(list, streams.Out); err != nil {
		return errors.New("printing ResourcePools: " + err.Error())
	}
	return nil
}
