package kubectldra

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/kubectl/pkg/describe"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
)

const describeNodeExample = `  # The DRA pools of a node, with their counts
  kubectl dra describe node node-1

  # ... and every device with its state and claims
  kubectl dra describe node node-1 --show-devices`

type describeNodeOptions struct {
	configFlags *genericclioptions.ConfigFlags
	streams     genericiooptions.IOStreams
	node        string
	showDevices bool
	now         func() time.Time
}

func newDescribeNodeCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &describeNodeOptions{configFlags: configFlags, streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:     "node NODE [--show-devices]",
		Short:   "Show the DRA pools of a node: where there is room",
		Example: describeNodeExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.node = args[0]
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.showDevices, "show-devices", false, "List each pool's devices with their state and claims.")
	return cmd
}

func (o *describeNodeOptions) run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	poolClient, client, err := clients(o.configFlags)
	if err != nil {
		return err
	}
	// An unknown node is an error; a node one may not read is not.
	if _, err := client.CoreV1().Nodes().Get(ctx, o.node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("node %q not found", o.node)
	} else if err != nil && !apierrors.IsForbidden(err) {
		return fmt.Errorf("reading node %s: %w", o.node, err)
	}

	pools, err := listResourcePools(ctx, poolClient, poolFilter{node: o.node})
	var notes []string
	if err != nil || len(pools) == 0 {
		if err != nil && !v1alpha1.IsNotServed(err) && !apierrors.IsForbidden(err) {
			return fmt.Errorf("listing ResourcePools: %w", err)
		}
		pools, notes, err = computePools(ctx, client, "", o.node, o.now())
		if err != nil {
			return err
		}
		notes = append([]string{"(no ResourcePool objects to read: computed from ResourceSlices and ResourceClaims)"}, notes...)
	}
	for _, note := range notes {
		fmt.Fprintln(o.streams.ErrOut, note)
	}

	tw := printers.GetNewTabWriter(o.streams.Out)
	w := describe.NewPrefixWriter(tw)
	w.Write(describe.LEVEL_0, "Name:\t%s\n", o.node)
	if len(pools) == 0 {
		w.Write(describe.LEVEL_0, "DRA Resources:\t<none>\n")
		return tw.Flush()
	}
	w.Write(describe.LEVEL_0, "DRA Resources:\n")
	w.Write(describe.LEVEL_1, "Pool\tDriver\tTotal\tAllocated\tAvailable\tUnavailable\tValid\n")
	w.Write(describe.LEVEL_1, "----\t------\t-----\t---------\t---------\t-----------\t-----\n")
	for _, rp := range pools {
		sum := rp.Status.Summary
		if sum == nil {
			sum = &v1alpha1.PoolSummary{}
		}
		valid := "Unknown"
		if c := meta.FindStatusCondition(rp.Status.Conditions, v1alpha1.ConditionValid); c != nil {
			valid = string(c.Status)
		}
		w.Write(describe.LEVEL_1, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", rp.Spec.PoolName, rp.Spec.Driver,
			sum.TotalDevices, sum.AllocatedDevices, sum.AvailableDevices, sum.UnavailableDevices, valid)
	}
	if o.showDevices {
		namespace, _, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			return err
		}
		for i := range pools {
			rp := &pools[i]
			id := drausage.PoolID{Driver: rp.Spec.Driver, Pool: rp.Spec.PoolName}
			poolSlices, err := listPoolSlices(ctx, client, id)
			if err != nil {
				return err
			}
			detail, note, err := deviceDetail(ctx, client, id, rp, namespace, poolSlices)
			if err != nil {
				return err
			}
			w.Write(describe.LEVEL_0, "Devices of %s:\n", rp.Name)
			if detail != nil && note != "" {
				w.Write(describe.LEVEL_1, "%s\n", note)
			}
			writeDevices(w, describe.LEVEL_1, detail, note)
		}
	}
	return tw.Flush()
}

// writeDevices writes a device detail table, or the note saying why there is none.
func writeDevices(w describe.PrefixWriter, level int, detail *drausage.PoolUsage, note string) {
	if detail == nil {
		w.Write(level, "%s\n", note)
		return
	}
	w.Write(level, "Device\tState\tHealth\tClaim\tDetails\n")
	w.Write(level, "------\t-----\t------\t-----\t-------\n")
	for _, d := range detail.Devices {
		claims := make([]string, 0, len(d.Allocations))
		var details []string
		for _, a := range d.Allocations {
			claims = append(claims, a.Claim.String())
			if len(a.ConsumedCapacity) > 0 {
				details = append(details, a.Claim.String()+" consumes "+capacityString(a))
			}
		}
		for _, a := range d.AdminAccess {
			details = append(details, "observed by "+a.Claim.String()+" (admin access)")
		}
		switch {
		case d.Reason != "":
			details = append([]string{d.Unavailability()}, details...)
		case d.Health.Status == v1.ResourceHealthStatusUnhealthy:
			details = append([]string{d.Health.Detail}, details...)
		}
		health := d.Health.Status
		if health == "" {
			health = v1.ResourceHealthStatusUnknown
		}
		claim := orNone(strings.Join(claims, ", "))
		if len(claims) == 0 && (d.State == drausage.DeviceAllocated || d.State == drausage.DevicePartiallyAllocated) {
			claim = hiddenClaim
		}
		w.Write(level, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.State, health, claim, strings.Join(details, "; "))
	}
}
