package kubectldra

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/pkg/drausage"
)

const describePoolExample = `  # A pool by its ResourcePool name
  kubectl dra describe pool gpu.example.com.node-1

  # A pool by driver and pool name
  kubectl dra describe pool --driver gpu.example.com --pool node-1`

func newDescribeCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show the details of a DRA pool, a node's pools, or why a pod's claims keep it pending",
	}
	o := &describePoolOptions{configFlags: configFlags, IOStreams: streams, now: time.Now}
	pool := &cobra.Command{
		Use:     "pool (NAME | --driver DRIVER --pool POOL)",
		Short:   "Show a pool's counts, conditions and devices, as far as you may read them",
		Example: describePoolExample,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	pool.Flags().StringVar(&o.driver, "driver", "", "The pool's DRA driver (with --pool, instead of NAME).")
	pool.Flags().StringVar(&o.pool, "pool", "", "The pool's name (with --driver, instead of NAME).")
	cmd.AddCommand(pool, newDescribeNodeCommand(configFlags, streams), newDescribePodCommand(configFlags, streams))
	return cmd
}

// describePoolOptions are the flags and state of kubectl dra describe pool.
type describePoolOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	name         string
	driver, pool string
	now          func() time.Time

	source *poolSource
}

// Complete takes the pool's name from the arguments and builds the source.
func (o *describePoolOptions) Complete(args []string) error {
	if len(args) == 1 {
		o.name = args[0]
	}
	var err error
	o.source, err = newPoolSource(o.configFlags, o.now())
	return err
}

// Validate checks that exactly one way of naming the pool was used.
func (o *describePoolOptions) Validate() error {
	if (o.name == "") == (o.driver == "" || o.pool == "") {
		return errors.New("name a pool: either NAME, or both --driver and --pool")
	}
	return nil
}

// Run describes the pool.
func (o *describePoolOptions) Run(ctx context.Context) error {
	rp, notes, err := o.source.Get(ctx, o.name, drausage.PoolID{Driver: o.driver, Pool: o.pool})
	for _, note := range notes {
		fmt.Fprintln(o.ErrOut, note)
	}
	if err != nil {
		return err
	}
	detail, detailNote, err := o.source.Detail(ctx, rp)
	if err != nil {
		return err
	}
	id := drausage.PoolID{Driver: rp.Spec.Driver, Pool: rp.Spec.PoolName}
	events, err := sliceEvents(ctx, o.source.client, o.source.view.poolSlices(id))
	if err != nil {
		return err
	}
	return printPool(o.Out, rp, detail, detailNote, events, o.now())
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
