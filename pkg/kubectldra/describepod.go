package kubectldra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/kubectl/pkg/describe"
	"sigs.k8s.io/yaml"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/deviceclass"
	"github.com/drascope/drascope/pkg/devicequota"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/whypending"
)

const describePodExample = `  # Why is my pod pending? Its claims, a verdict per request, the closest nodes
  kubectl dra describe pod train-0 -n team-a

  # The same as JSON, for tools (apiVersion drascope.dev/v1alpha1, kind PodDeviceReport)
  kubectl dra describe pod train-0 -n team-a -o json`

// What describe pod says, on its report's notes, when RBAC hid something.
const (
	noteNodesHidden    = "listing Nodes is not permitted: nodes are taken from the slices' node names; pools chosen by node labels reach none, and the pod's node selector and affinity are not applied"
	noteClassesHidden  = "listing DeviceClasses is not permitted: no device matches a request"
	notePodsHidden     = "listing Pods is not permitted: devices held by pods of lower priority are not counted"
	noteSlicesNoReport = "listing ResourceSlices is not permitted: no verdict per request (ask for list on resourceslices)"
)

// describePodOptions are the flags and state of kubectl dra describe pod.
type describePodOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	name    string
	output  string
	timeout time.Duration

	source    *poolSource
	namespace string
}

func newDescribePodCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &describePodOptions{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "pod NAME [-n NAMESPACE] [-o json|yaml]",
		Short: "Show why a pod's DRA claims keep it pending: each request's verdict, the closest nodes, the scheduler's message",
		Long: `Shows each claim and request of the pod as asked and, for claims still to
allocate, a verdict per request: how many nodes reach matching devices, how
many have enough free, and why the others are not free (allocated,
tainted, Unhealthy, short of shared counters). It asks upstream's
structured allocator, node by node and within --timeout, where the claims
fit, names the nodes that came closest and what each lacks, and ends with
one line to act on. It reads what you may read: what RBAC hid is said, and
devices held by claims you may not read are counted from ResourcePools.`,
		Example: describePodExample,
		Args:    cobra.ExactArgs(1),
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
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (a PodDeviceReport, drascope.dev/v1alpha1). Default: text.")
	cmd.Flags().DurationVar(&o.timeout, "timeout", whypending.DefaultTimeout, "How long the allocator may search for a node the claims fit on.")
	return cmd
}

// Complete takes the pod from the arguments and builds the source.
func (o *describePodOptions) Complete(args []string) error {
	o.name = args[0]
	var err error
	if o.source, err = newPoolSource(o.configFlags, time.Now()); err != nil {
		return err
	}
	o.namespace = o.source.namespace
	if o.namespace == "" {
		o.namespace = metav1.NamespaceDefault
	}
	return nil
}

// Validate checks the output format and the timeout.
func (o *describePodOptions) Validate() error {
	if o.output != "" && o.output != "json" && o.output != "yaml" {
		return fmt.Errorf("unknown output format %q: use json or yaml, or leave -o out for text", o.output)
	}
	if o.timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

// Run explains the pod.
func (o *describePodOptions) Run(ctx context.Context) error {
	client := o.source.client
	pod, err := client.CoreV1().Pods(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading pod %s/%s: %w", o.namespace, o.name, err)
	}
	claims, err := o.podClaims(ctx, pod)
	if err != nil {
		return err
	}
	report, err := o.explain(ctx, pod, claims)
	if err != nil {
		return err
	}
	report.SchedulerMessage = schedulerMessage(pod)
	if report.Events, err = podEvents(ctx, o.source, pod); err != nil {
		return err
	}
	switch o.output {
	case "json":
		data, err := json.MarshalIndent(report, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.Out, string(data))
		return err
	case "yaml":
		data, err := yaml.Marshal(report)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(data)
		return err
	}
	return printPodReport(o.Out, pod, report)
}

// podClaims finds the pod's claims, as the scheduler names them.
func (o *describePodOptions) podClaims(ctx context.Context, pod *v1.Pod) ([]whypending.PodClaim, error) {
	var claims []whypending.PodClaim
	for i := range pod.Spec.ResourceClaims {
		pc := whypending.PodClaim{Name: pod.Spec.ResourceClaims[i].Name}
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		switch {
		case err != nil:
			// Made from a template, and not created yet.
			claims = append(claims, pc)
			continue
		case name == nil:
			// Not needed: the pod's status says so.
			continue
		}
		pc.ResourceClaim = *name
		claim, err := o.source.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			pc.Hidden = true
		case err != nil:
			return nil, fmt.Errorf("reading ResourceClaim %s/%s: %w", pod.Namespace, *name, err)
		default:
			pc.Claim = claim
		}
		claims = append(claims, pc)
	}
	return claims, nil
}

// explain reads what the user may read of the cluster and explains the
// pod's claims.
func (o *describePodOptions) explain(ctx context.Context, pod *v1.Pod, claims []whypending.PodClaim) (*whypending.Report, error) {
	view, err := o.source.load(ctx)
	if err != nil {
		return nil, err
	}
	cluster := whypending.Cluster{Slices: view.slices, TaintRules: view.taintRules, Claims: view.claims, Features: whypending.DefaultFeatures}
	var notes []string
	cluster.SlicesHidden = view.slicesHidden
	if view.slicesHidden {
		notes = append(notes, noteSlicesNoReport)
	}
	if view.taintRulesHidden {
		notes = append(notes, "listing DeviceTaintRules is not permitted: devices they taint count as their slices say")
	}
	switch {
	case view.claimsHidden:
		notes = append(notes, "listing ResourceClaims is not permitted: the devices claims hold are counted from the ResourcePools drascope-scheduler publishes")
	case view.claimsNamespaces != nil:
		notes = append(notes, fmt.Sprintf("listing ResourceClaims is permitted in namespaces %s only: the devices other claims hold are counted from the ResourcePools drascope-scheduler publishes", strings.Join(view.claimsNamespaces, ", ")))
	}
	if cluster.Nodes, cluster.NodesHidden, err = o.nodes(ctx, view.slices, &notes); err != nil {
		return nil, err
	}
	if cluster.Classes, cluster.ClassesHidden, err = o.classes(ctx, &notes); err != nil {
		return nil, err
	}
	if cluster.Pods, err = o.pods(ctx, &notes); err != nil {
		return nil, err
	}
	if cluster.Pools, err = o.pools(ctx, view, &notes); err != nil {
		return nil, err
	}
	guard, err := o.adminAccessGuard(ctx, pod.Namespace, claims, &notes)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout+time.Minute)
	defer cancel()
	report := whypending.Explain(ctx, pod, claims, cluster, whypending.Options{Timeout: o.timeout, AdminAccess: guard})
	if err := o.quotaRefusal(ctx, pod.Namespace, claims, report, &notes); err != nil {
		return nil, err
	}
	report.Notes = append(notes, report.Notes...)
	return report, nil
}

// quotaRefusal fills the report's QuotaRefusal from the namespace's
// DeviceQuotas, as their status (which drascope-scheduler writes, in
// flight included) says is used, and puts it first in the conclusion.
func (o *describePodOptions) quotaRefusal(ctx context.Context, namespace string, claims []whypending.PodClaim, report *whypending.Report, notes *[]string) error {
	var toAllocate []*resourceapi.ResourceClaim
	for _, pc := range claims {
		if pc.Claim != nil && pc.Claim.Status.Allocation == nil {
			toAllocate = append(toAllocate, pc.Claim)
		}
	}
	need := devicequota.NeedOf(toAllocate)
	if len(need) == 0 {
		return nil
	}
	list, err := o.source.pools.DrascopeV1alpha1().DeviceQuotas(namespace).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // DeviceQuotas are not served: none is enforced
	case apierrors.IsForbidden(err):
		*notes = append(*notes, "listing DeviceQuotas is not permitted: a quota that refuses the pod is not named")
		return nil
	case err != nil:
		return fmt.Errorf("listing DeviceQuotas: %w", err)
	}
	for i := range list.Items {
		quota := &list.Items[i]
		if excess, over := devicequota.Check([]*v1alpha1.DeviceQuota{quota}, devicequota.UsedOf(quota.Status), need); over {
			report.QuotaRefusal = excess.String()
			what := "no node fits them either: " + report.Conclusion
			if report.Fit != nil && report.Fit.Count > 0 {
				what = "the devices fit otherwise; raise the quota or wait for pods of the namespace to finish"
			}
			report.Conclusion = excess.String() + "; " + what
			return nil
		}
	}
	return nil
}

// adminAccessGuard is DRAScope's admin-access guard as the shipped
// configuration sets it (adminAccess.requireNamespaceLabel: true), over
// the pod's namespace, when a claim asks for admin access; nil when none
// does, or the namespace may not be read (a note says so).
func (o *describePodOptions) adminAccessGuard(ctx context.Context, namespace string, claims []whypending.PodClaim, notes *[]string) (*adminaccess.Guard, error) {
	asks := slices.ContainsFunc(claims, func(pc whypending.PodClaim) bool {
		return pc.Claim != nil && adminaccess.FirstRequest(pc.Claim) != ""
	})
	if !asks {
		return nil, nil
	}
	ns, err := o.source.client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		*notes = append(*notes, fmt.Sprintf("reading namespace %s is not permitted: whether it carries the admin-access label is not checked", namespace))
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(ns); err != nil {
		return nil, err
	}
	return &adminaccess.Guard{Enabled: true, RequireNamespaceLabel: true, Namespaces: corelisters.NewNamespaceLister(indexer)}, nil
}

// nodes lists the nodes, or, for a user who may not, names the nodes the
// slices name.
func (o *describePodOptions) nodes(ctx context.Context, listed []*resourceapi.ResourceSlice, notes *[]string) ([]*v1.Node, bool, error) {
	list, err := o.source.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		*notes = append(*notes, noteNodesHidden)
		names := sets.New[string]()
		for _, slice := range listed {
			if slice.Spec.NodeName != nil && *slice.Spec.NodeName != "" {
				names.Insert(*slice.Spec.NodeName)
			}
			for _, device := range slice.Spec.Devices {
				if device.NodeName != nil && *device.NodeName != "" {
					names.Insert(*device.NodeName)
				}
			}
		}
		var nodes []*v1.Node
		for _, name := range sets.List(names) {
			nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
		return nodes, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("listing Nodes: %w", err)
	}
	nodes := make([]*v1.Node, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	return nodes, false, nil
}

func (o *describePodOptions) classes(ctx context.Context, notes *[]string) (deviceclass.List, bool, error) {
	list, err := o.source.client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		*notes = append(*notes, noteClassesHidden)
		return deviceclass.List{}, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	classes := deviceclass.List{}
	for i := range list.Items {
		classes[list.Items[i].Name] = &list.Items[i]
	}
	return classes, false, nil
}

// pods lists the pods that run, for the devices pods of lower priority
// hold; nil when they may not be listed.
func (o *describePodOptions) pods(ctx context.Context, notes *[]string) ([]*v1.Pod, error) {
	list, err := o.source.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
	switch {
	case apierrors.IsForbidden(err):
		*notes = append(*notes, notePodsHidden)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing Pods: %w", err)
	}
	pods := make([]*v1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	return pods, nil
}

// pools counts every pool's devices from what the user may read, with the
// health drascope-scheduler published and, where claims are hidden, the
// devices held by others from the ResourcePools.
func (o *describePodOptions) pools(ctx context.Context, view *clusterView, notes *[]string) ([]drausage.PoolUsage, error) {
	byID := map[drausage.PoolID]*v1alpha1.ResourcePool{}
	list, err := o.source.pools.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		for i := range list.Items {
			rp := &list.Items[i]
			byID[drausage.PoolID{Driver: rp.Spec.Driver, Pool: rp.Spec.PoolName}] = rp
		}
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		*notes = append(*notes, "ResourcePools cannot be read: the devices' health is not known, and devices held by claims you may not read count as free")
	default:
		return nil, fmt.Errorf("listing ResourcePools: %w", err)
	}
	ids := sets.New[drausage.PoolID]()
	for _, slice := range view.slices {
		ids.Insert(drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name})
	}
	var pools []drausage.PoolUsage
	sorted := ids.UnsortedList()
	slices.SortFunc(sorted, func(a, b drausage.PoolID) int { return strings.Compare(a.String(), b.String()) })
	for _, id := range sorted {
		opts := drausage.Options{DeviceTaintRules: view.taintRules, HealthTaintKey: health.TaintKey}
		rp := byID[id]
		if rp != nil {
			opts.Health, opts.WithholdUnhealthy = schedulerHealth(rp)
		}
		usage := drausage.ComputePool(id, view.poolSlices(id), view.claims, opts)
		if rp != nil && (view.claimsNamespaces != nil || view.claimsHidden) {
			markHeldByOthers(&usage, rp)
		}
		pools = append(pools, usage)
	}
	return pools, nil
}

// schedulerMessage is the pod's PodScheduled condition, as the scheduler
// wrote it.
func schedulerMessage(pod *v1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled {
			if c.Message == "" {
				return fmt.Sprintf("%s=%s", c.Type, c.Status)
			}
			return c.Message
		}
	}
	return ""
}

// podEvents are the pod's latest events (at most whypending.MaxEvents),
// oldest first; none when events may not be read.
func podEvents(ctx context.Context, source *poolSource, pod *v1.Pod) ([]string, error) {
	selector := fields.AndSelectors(fields.OneTermEqualSelector("regarding.name", pod.Name), fields.OneTermEqualSelector("regarding.kind", "Pod"))
	list, err := source.client.EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector.String()})
	if apierrors.IsForbidden(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the pod's events: %w", err)
	}
	events := list.Items
	slices.SortStableFunc(events, func(a, b eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	if len(events) > whypending.MaxEvents {
		events = events[len(events)-whypending.MaxEvents:]
	}
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s %s %s: %s", eventTime(e).UTC().Format(time.RFC3339), e.Type, e.Reason, e.Note))
	}
	return out, nil
}

// printPodReport writes the report as kubectl describe writes an object.
func printPodReport(out io.Writer, pod *v1.Pod, r *whypending.Report) error {
	tw := printers.GetNewTabWriter(out)
	w := describe.NewPrefixWriter(tw)
	w.Write(describe.LEVEL_0, "Name:\t%s\n", pod.Name)
	w.Write(describe.LEVEL_0, "Namespace:\t%s\n", pod.Namespace)
	w.Write(describe.LEVEL_0, "Node:\t%s\n", orNone(r.Node))
	w.Write(describe.LEVEL_0, "Claims:\n")
	for _, c := range r.Claims {
		printClaimReport(w, c)
	}
	if r.Fit != nil {
		w.Write(describe.LEVEL_0, "Fits on:\t%s\n", fitString(r.Fit))
	}
	if len(r.Closest) > 0 {
		w.Write(describe.LEVEL_0, "Closest nodes:\n")
		for _, n := range r.Closest {
			w.Write(describe.LEVEL_1, "%s:\t%s\n", n.Node, strings.Join(n.Lacks, "; "))
		}
	}
	if r.QuotaRefusal != "" {
		w.Write(describe.LEVEL_0, "Quota:\t%s\n", r.QuotaRefusal)
	}
	w.Write(describe.LEVEL_0, "Conclusion:\t%s\n", r.Conclusion)
	for i, note := range r.Notes {
		label := ""
		if i == 0 {
			label = "Notes:"
		}
		w.Write(describe.LEVEL_0, "%s\t%s\n", label, note)
	}
	w.Write(describe.LEVEL_0, "Scheduler:\t%s\n", orNone(r.SchedulerMessage))
	if len(r.Events) == 0 {
		w.Write(describe.LEVEL_0, "Events:\t<none>\n")
	} else {
		w.Write(describe.LEVEL_0, "Events:\n")
		for _, e := range r.Events {
			w.Write(describe.LEVEL_1, "%s\n", e)
		}
	}
	return tw.Flush()
}

func printClaimReport(w describe.PrefixWriter, c whypending.ClaimReport) {
	resource := c.ResourceClaim
	switch {
	case c.Hidden:
		resource += ", may not be read"
	case c.Missing && resource == "":
		resource = "not created yet"
	case c.Missing:
		resource += ", does not exist"
	}
	w.Write(describe.LEVEL_1, "%s:\t%s\n", c.Name, resource)
	if c.Missing || c.Hidden {
		return
	}
	allocated := "no"
	if c.Allocated {
		allocated = "yes"
		if len(c.AllocatedOn) > 0 {
			allocated += ", on " + strings.Join(c.AllocatedOn, ", ")
		}
	}
	w.Write(describe.LEVEL_2, "Allocated:\t%s\n", allocated)
	for _, r := range c.Requests {
		w.Write(describe.LEVEL_2, "Request %s:\n", r.Name)
		count := "all"
		if r.AllocationMode != string(resourceapi.DeviceAllocationModeAll) {
			count = fmt.Sprint(r.Count)
		}
		w.Write(describe.LEVEL_3, "Device class:\t%s\n", r.DeviceClass)
		w.Write(describe.LEVEL_3, "Count:\t%s\n", count)
		for _, s := range r.Selectors {
			w.Write(describe.LEVEL_3, "Selector:\t%s\n", s)
		}
		if len(r.Capacity) > 0 {
			w.Write(describe.LEVEL_3, "Capacity:\t%s\n", strings.Join(r.Capacity, ", "))
		}
		if r.AdminAccess {
			w.Write(describe.LEVEL_3, "Admin access:\tyes\n")
		}
		if v := r.Verdict; v != nil {
			w.Write(describe.LEVEL_3, "Verdict:\t%s\n", verdictString(v))
			w.Write(describe.LEVEL_3, "Devices:\t%s\n", devicesString(v))
		}
	}
	for _, c := range c.Constraints {
		w.Write(describe.LEVEL_2, "Constraint:\t%s\n", c)
	}
}

func verdictString(v *whypending.Verdict) string {
	if v.ClassMissing {
		return "the device class does not exist"
	}
	if v.NodesWithMatching == 0 {
		return "no node has a matching device"
	}
	if v.MostFree == 0 {
		return fmt.Sprintf("%s with matching devices, none with one free", whypending.Nodes(v.NodesWithMatching))
	}
	need := fmt.Sprint(v.Need)
	if v.Need == 0 {
		need = "all their matching"
	}
	return fmt.Sprintf("%s with matching devices, %d with %s free; most free on one node: %d (on %s)", whypending.Nodes(v.NodesWithMatching),
		v.NodesWithEnough, need, v.MostFree, whypending.Nodes(v.NodesWithMostFree))
}

func devicesString(v *whypending.Verdict) string {
	d := v.Devices
	s := fmt.Sprintf("%d matching: %d free, %d allocated", d.Matching, d.Free, d.Allocated)
	if d.HeldByLowerPriority > 0 {
		s += fmt.Sprintf(" (%d by pods of lower priority)", d.HeldByLowerPriority)
	}
	s += fmt.Sprintf(", %d tainted, %d Unhealthy, %d short of counters, %d short of capacity", d.Tainted, d.Unhealthy, d.CountersExhausted, d.CapacityExhausted)
	if len(v.Taints) > 0 {
		s += " (taints: " + strings.Join(v.Taints, ", ") + ")"
	}
	return s
}

func fitString(f *whypending.FitReport) string {
	var s string
	if f.Count == 0 {
		s = fmt.Sprintf("no node (the allocator was asked about %d)", f.Tried)
		if f.ConstraintsFail {
			s += "; the claims fit without their constraints"
		}
	} else {
		s = strings.Join(f.Nodes, ", ")
		if more := f.Count - len(f.Nodes); more > 0 {
			s += fmt.Sprintf(" and %d more", more)
		}
	}
	switch {
	case f.TimedOut:
		s += fmt.Sprintf("; %d nodes left unasked when the time ran out", f.Untried)
	case f.RunsExhausted:
		s += fmt.Sprintf("; %d nodes left unasked after %d runs", f.Untried, f.Tried)
	}
	return s
}
