package kubectldra

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/describe"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

const describePoolExample = `  # A pool by its ResourcePool name
  kubectl dra describe pool gpu.example.com.node-1

  # A pool by driver and pool name
  kubectl dra describe pool --driver gpu.example.com --pool node-1`

func newDescribeCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show the details of a DRA pool",
	}
	o := &describePoolOptions{configFlags: configFlags, streams: streams, now: time.Now}
	pool := &cobra.Command{
		Use:     "pool (NAME | --driver DRIVER --pool POOL)",
		Short:   "Show a pool's counts, conditions and devices, as far as you may read them",
		Example: describePoolExample,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.name = args[0]
			}
			return o.run(cmd.Context())
		},
	}
	pool.Flags().StringVar(&o.driver, "driver", "", "The pool's DRA driver (with --pool, instead of NAME).")
	pool.Flags().StringVar(&o.pool, "pool", "", "The pool's name (with --driver, instead of NAME).")
	cmd.AddCommand(pool, newDescribeNodeCommand(configFlags, streams))
	return cmd
}

type describePoolOptions struct {
	configFlags  *genericclioptions.ConfigFlags
	streams      genericiooptions.IOStreams
	name         string
	driver, pool string
	now          func() time.Time
}

func (o *describePoolOptions) run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if (o.name == "") == (o.driver == "" || o.pool == "") {
		return fmt.Errorf("name a pool: either NAME, or both --driver and --pool")
	}
	poolClient, client, err := clients(o.configFlags)
	if err != nil {
		return err
	}

	rp, notes, err := o.findPool(ctx, poolClient, client)
	if err != nil {
		return err
	}
	id := drausage.PoolID{Driver: rp.Spec.Driver, Pool: rp.Spec.PoolName}
	namespace, _, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	poolSlices, err := listPoolSlices(ctx, client, id)
	if err != nil {
		return err
	}
	detail, detailNote, err := deviceDetail(ctx, client, id, rp, namespace, poolSlices)
	if err != nil {
		return err
	}
	events, err := sliceEvents(ctx, client, poolSlices)
	if err != nil {
		return err
	}
	for _, note := range notes {
		fmt.Fprintln(o.streams.ErrOut, note)
	}
	return printPool(o.streams, rp, detail, detailNote, events, o.now())
}

// findPool returns the pool's ResourcePool, or one computed client side when
// no object can be read.
func (o *describePoolOptions) findPool(ctx context.Context, poolClient versioned.Interface, client kubernetes.Interface) (*v1alpha1.ResourcePool, []string, error) {
	var err error
	if o.name != "" {
		var rp *v1alpha1.ResourcePool
		rp, err = poolClient.DrascopeV1alpha1().ResourcePools().Get(ctx, o.name, metav1.GetOptions{})
		if err == nil {
			return rp, nil, nil
		}
	} else {
		var pools []v1alpha1.ResourcePool
		pools, err = listResourcePools(ctx, poolClient, poolFilter{driver: o.driver, pool: o.pool})
		if err == nil && len(pools) == 1 {
			return &pools[0], nil, nil
		}
	}
	if err != nil && !apierrors.IsNotFound(err) && !v1alpha1.IsNotServed(err) && !apierrors.IsForbidden(err) {
		return nil, nil, fmt.Errorf("reading ResourcePools: %w", err)
	}
	computed, notes, cerr := computePools(ctx, client, o.driver, "", o.now())
	if cerr != nil {
		return nil, nil, cerr
	}
	for i := range computed {
		rp := &computed[i]
		if rp.Name == o.name || (o.name == "" && rp.Spec.Driver == o.driver && rp.Spec.PoolName == o.pool) {
			return rp, append([]string{"(no ResourcePool object to read: computed from ResourceSlices and ResourceClaims)"}, notes...), nil
		}
	}
	if o.name != "" {
		return nil, nil, fmt.Errorf("pool %q not found: no ResourcePool and no ResourceSlices of that name (list them with kubectl dra pools)", o.name)
	}
	return nil, nil, fmt.Errorf("pool %q of driver %q not found (list pools with kubectl dra pools --driver %s)", o.pool, o.driver, o.driver)
}

// listPoolSlices returns the ResourceSlices of one pool, or nil when the user
// may not list ResourceSlices.
func listPoolSlices(ctx context.Context, client kubernetes.Interface, id drausage.PoolID) ([]*resourceapi.ResourceSlice, error) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	poolSlices := []*resourceapi.ResourceSlice{}
	for i := range list.Items {
		if s := &list.Items[i]; s.Spec.Driver == id.Driver && s.Spec.Pool.Name == id.Pool {
			poolSlices = append(poolSlices, s)
		}
	}
	return poolSlices, nil
}

// hiddenClaim stands in the Claim column for a held device none of whose
// claims the user may list.
const hiddenClaim = "<not permitted>"

// deviceDetail computes per-device state client side from the claims the
// user may list: all of them, or those of one namespace. In the second case
// the devices other claims hold are taken from the ResourcePool, which says
// which devices are held but not by whom. Without any claim access it
// returns nil and the line that says so; missing permission is never an
// error.
func deviceDetail(ctx context.Context, client kubernetes.Interface, id drausage.PoolID, rp *v1alpha1.ResourcePool, namespace string, poolSlices []*resourceapi.ResourceSlice) (*drausage.PoolUsage, string, error) {
	if poolSlices == nil {
		return nil, "(listing ResourceSlices is not permitted: device detail hidden)", nil
	}
	note := ""
	claimList, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) && namespace != "" {
		claimList, err = client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		note = fmt.Sprintf("(listing ResourceClaims is permitted in namespace %s only: devices held by other claims are shown without them)", namespace)
	}
	if apierrors.IsForbidden(err) {
		return nil, "(listing ResourceClaims is not permitted: device detail hidden)", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("listing ResourceClaims: %w", err)
	}
	claims := make([]*resourceapi.ResourceClaim, 0, len(claimList.Items))
	for i := range claimList.Items {
		claims = append(claims, &claimList.Items[i])
	}
	var opts drausage.Options
	if rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range rules.Items {
			opts.DeviceTaintRules = append(opts.DeviceTaintRules, &rules.Items[i])
		}
	}
	opts.Health, opts.WithholdUnhealthy = schedulerHealth(rp)
	usage := drausage.ComputePool(id, poolSlices, claims, opts)
	if note != "" {
		markHeldByOthers(&usage, rp)
	}
	return &usage, note, nil
}

// schedulerHealth returns device health as the scheduler remembers it, from
// the ResourcePool: it learned it from pod statuses, some of them of pods
// long deleted, which a client cannot see. It also says whether the
// scheduler withholds Unhealthy devices, as the ResourcePool publishes its
// deviceHealth.policy.
func schedulerHealth(rp *v1alpha1.ResourcePool) (func(drausage.PoolID, string) drausage.DeviceHealth, bool) {
	withholds := rp.Status.DeviceHealthPolicy == string(config.DeviceHealthAvoid)
	known := map[string]drausage.DeviceHealth{}
	for _, d := range rp.Status.Devices {
		if d.Health != "" {
			known[d.Name] = drausage.DeviceHealth{Status: v1.ResourceHealthStatus(d.Health), Detail: d.HealthMessage}
		}
	}
	if len(known) == 0 {
		return nil, withholds
	}
	return func(_ drausage.PoolID, device string) drausage.DeviceHealth { return known[device] }, withholds
}

// markHeldByOthers takes, from the ResourcePool, the state of devices that
// claims the user may not list hold.
func markHeldByOthers(usage *drausage.PoolUsage, rp *v1alpha1.ResourcePool) {
	held := map[string]string{}
	for _, d := range rp.Status.Devices {
		if d.State == string(drausage.DeviceAllocated) || d.State == string(drausage.DevicePartiallyAllocated) {
			held[d.Name] = d.State
		}
	}
	for i := range usage.Devices {
		d := &usage.Devices[i]
		state, ok := held[d.Name]
		if !ok || len(d.Allocations) > 0 {
			continue
		}
		// Held, but by no claim the user may list: no allocation to show.
		d.State, d.Reason, d.Message = drausage.DeviceState(state), "", ""
	}
}

// sliceEvents returns the recent events about the pool's slices, oldest
// first; none when events may not be read.
func sliceEvents(ctx context.Context, client kubernetes.Interface, poolSlices []*resourceapi.ResourceSlice) ([]eventsv1.Event, error) {
	if len(poolSlices) == 0 {
		return nil, nil
	}
	list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=ResourceSlice"})
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	names := map[string]bool{}
	for _, s := range poolSlices {
		names[s.Name] = true
	}
	var events []eventsv1.Event
	for _, e := range list.Items {
		if names[e.Regarding.Name] {
			events = append(events, e)
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return eventTime(events[i]).Before(eventTime(events[j])) })
	return events, nil
}

func eventTime(e eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func printPool(streams genericiooptions.IOStreams, rp *v1alpha1.ResourcePool, detail *drausage.PoolUsage, detailNote string, events []eventsv1.Event, now time.Time) error {
	tw := printers.GetNewTabWriter(streams.Out)
	w := describe.NewPrefixWriter(tw)
	w.Write(describe.LEVEL_0, "Name:\t%s\n", rp.Name)
	w.Write(describe.LEVEL_0, "Driver:\t%s\n", rp.Spec.Driver)
	w.Write(describe.LEVEL_0, "Pool:\t%s\n", rp.Spec.PoolName)
	w.Write(describe.LEVEL_0, "Node:\t%s\n", orNone(rp.Spec.NodeName))
	sum := rp.Status.Summary
	if sum == nil {
		sum = &v1alpha1.PoolSummary{}
	}
	w.Write(describe.LEVEL_0, "Summary:\n")
	w.Write(describe.LEVEL_1, "Total:\t%d\n", sum.TotalDevices)
	w.Write(describe.LEVEL_1, "Allocated:\t%d\n", sum.AllocatedDevices)
	w.Write(describe.LEVEL_1, "Partially Allocated:\t%d\n", sum.PartiallyAllocatedDevices)
	w.Write(describe.LEVEL_1, "Available:\t%d\n", sum.AvailableDevices)
	w.Write(describe.LEVEL_1, "Unavailable:\t%d\n", sum.UnavailableDevices)
	w.Write(describe.LEVEL_0, "Conditions:\n")
	w.Write(describe.LEVEL_1, "Type\tStatus\tReason\tMessage\n")
	w.Write(describe.LEVEL_1, "----\t------\t------\t-------\n")
	for _, c := range rp.Status.Conditions {
		w.Write(describe.LEVEL_1, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	w.Write(describe.LEVEL_0, "Slices:\t%d of %d\n", rp.Status.ObservedSliceCount, rp.Status.ExpectedSliceCount)
	w.Write(describe.LEVEL_0, "Generation:\t%d\n", rp.Status.ObservedGeneration)
	if rp.Status.LastUpdateTime != nil {
		w.Write(describe.LEVEL_0, "Last Update:\t%s\n", rp.Status.LastUpdateTime.Format(time.RFC1123Z))
	} else {
		w.Write(describe.LEVEL_0, "Last Update:\t<computed now>\n")
	}
	if len(rp.Status.ValidationErrors) == 0 {
		w.Write(describe.LEVEL_0, "Validation Errors:\t<none>\n")
	} else {
		w.Write(describe.LEVEL_0, "Validation Errors:\n")
		for _, e := range rp.Status.ValidationErrors {
			w.Write(describe.LEVEL_1, "%s\n", e)
		}
		if rp.Status.TruncatedErrorCount > 0 {
			w.Write(describe.LEVEL_1, "(%d more not listed)\n", rp.Status.TruncatedErrorCount)
		}
	}

	if detail == nil {
		w.Write(describe.LEVEL_0, "Device Details:\t%s\n", detailNote)
	} else {
		w.Write(describe.LEVEL_0, "Device Details:\n")
		if detailNote != "" {
			w.Write(describe.LEVEL_1, "%s\n", detailNote)
		}
		writeDevices(w, describe.LEVEL_1, detail, detailNote)
	}

	if len(events) == 0 {
		w.Write(describe.LEVEL_0, "Events:\t<none>\n")
	} else {
		w.Write(describe.LEVEL_0, "Events:\n")
		w.Write(describe.LEVEL_1, "Type\tReason\tAge\tSlice\tMessage\n")
		w.Write(describe.LEVEL_1, "----\t------\t---\t-----\t-------\n")
		for _, e := range events {
			w.Write(describe.LEVEL_1, "%s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, duration.HumanDuration(now.Sub(eventTime(e))), e.Regarding.Name, strings.TrimSpace(e.Note))
		}
	}
	return tw.Flush()
}

func capacityString(a drausage.Allocation) string {
	parts := make([]string, 0, len(a.ConsumedCapacity))
	for name, q := range a.ConsumedCapacity {
		parts = append(parts, fmt.Sprintf("%s=%s", name, q.String()))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
