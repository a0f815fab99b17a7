package kubectldra

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/pkg/health"
)

const healthClearExample = `  # Put a repaired GPU back into service now, not at the end of its hold time
  kubectl dra health clear gpu.example.com/node-1/gpu-3

  # ... and wait until drascope-scheduler has taken it and deleted its rule
  kubectl dra health clear gpu.example.com/node-1/gpu-3 --wait`

func newHealthCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Act on the device health drascope-scheduler holds",
	}
	cmd.AddCommand(newHealthClearCommand(configFlags, streams))
	return cmd
}

// healthClearOptions are the flags and state of kubectl dra health clear.
type healthClearOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	wait    bool
	timeout time.Duration
	now     func() time.Time

	device health.Device
	client kubernetes.Interface
}

func newHealthClearCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &healthClearOptions{configFlags: configFlags, IOStreams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "clear DRIVER/POOL/DEVICE [--wait]",
		Short: "End a device's Unhealthy state now, as an operator",
		Long: `Clear ends the Unhealthy state drascope-scheduler holds for a device, as it
stands now: the reports that hold it are set aside (a report its pod makes
later counts again), the device is Unknown, and the scheduler deletes the
device's DeviceTaintRule.

It works through that rule: it sets the annotation ` + health.AnnotationClearRequested + `
on it, which every drascope-scheduler replica reads. So it needs
deviceHealth.policy Taint (where the device has a rule) and permission to
patch DeviceTaintRules; the apiserver's audit log records who cleared what.
A holder pod cannot do this: one tenant's Healthy report never clears
another's Unhealthy one.`,
		Example: healthClearExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "Wait until drascope-scheduler has deleted the device's DeviceTaintRule.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "How long --wait waits.")
	return cmd
}

// parseDevice reads DRIVER/POOL/DEVICE. Pool names may hold slashes;
// driver and device names never do.
func parseDevice(arg string) (health.Device, error) {
	driver, rest, ok := strings.Cut(arg, "/")
	i := strings.LastIndex(rest, "/")
	if !ok || i <= 0 || driver == "" || i == len(rest)-1 {
		return health.Device{}, fmt.Errorf("%q: want DRIVER/POOL/DEVICE, as kubectl dra describe pool lists it", arg)
	}
	return health.Device{Driver: driver, Pool: rest[:i], Name: rest[i+1:]}, nil
}

// Complete reads the device and builds the client.
func (o *healthClearOptions) Complete(args []string) error {
	var err error
	if o.device, err = parseDevice(args[0]); err != nil {
		return err
	}
	_, o.client, err = clients(o.configFlags)
	return err
}

// Run asks for the clear on the device's rule, and with --wait waits for
// the rule to go.
func (o *healthClearOptions) Run(ctx context.Context) error {
	rules := o.client.ResourceV1().DeviceTaintRules()
	name := health.RuleName(o.device)
	rule, err := rules.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("device %s has no DeviceTaintRule of drascope's (%s): drascope-scheduler does not hold it Unhealthy under deviceHealth.policy Taint, or it already cleared it. Under Avoid the state lives only in the scheduler: the device is back when its reporting pod reports it Healthy or is gone for the hold time", o.device, name)
	case err != nil:
		return err
	}
	if !health.HasOwnLabel(rule) {
		return fmt.Errorf("DeviceTaintRule %s was not written by drascope (no label %s=%s); it is not drascope's to clear", name, health.ManagedByLabel, health.ManagedBy)
	}
	if d, ok := health.DeviceOfRule(rule); !ok || d != o.device {
		return fmt.Errorf("DeviceTaintRule %s does not select device %s; drascope-scheduler replaces it, try again in a moment", name, o.device)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": rule.ResourceVersion,
		"annotations":     map[string]string{health.AnnotationClearRequested: o.now().UTC().Format(time.RFC3339)},
	}})
	if err != nil {
		return err
	}
	if _, err := rules.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("DeviceTaintRule %s changed while clearing (the scheduler rewrote it); run the command again: %w", name, err)
		}
		return err
	}
	fmt.Fprintf(o.Out, "devicetaintrule/%s: clear requested for %s\n", name, o.device)
	if !o.wait {
		return nil
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.timeout, true, func(ctx context.Context) (bool, error) {
		current, err := rules.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		// Gone, and written again for a new report: cleared all the same.
		return err == nil && current.UID != rule.UID, err
	})
	if err != nil {
		return fmt.Errorf("waiting for drascope-scheduler to delete DeviceTaintRule %s (is a replica leading?): %w", name, err)
	}
	fmt.Fprintf(o.Out, "devicetaintrule/%s: deleted; %s is back in service\n", name, o.device)
	return nil
}
