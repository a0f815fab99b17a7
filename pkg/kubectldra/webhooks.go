package kubectldra

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"github.com/drascope/drascope/pkg/webhooks"
)

func newWebhooksCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "Find admission webhooks in the scheduler's write path, and keep them out of it",
		Long: `Every pod drascope-scheduler places costs API writes: the claim (its
finalizer) and the claim status, the pod binding and pod status, volume
binding, events; and it writes in the background: preemption's deletions,
PodGroup status, DRA extended resources' claims, device taint rules, its
leader-election lease, ResourcePools, and the token and access reviews of
/metrics. A validating
or mutating admission webhook that intercepts them slows scheduling, and
with failurePolicy Fail can stop it.

"audit" lists the webhooks whose rules reach those writes. "exclude" adds
exclusion rules in the form KEP-3693 proposed to a webhook configuration,
compiled to CEL matchConditions that the apiserver evaluates before calling
the webhook. See docs/webhooks.md.`,
	}
	cmd.AddCommand(newWebhooksAuditCommand(configFlags, streams), newWebhooksExcludeCommand(configFlags, streams))
	return cmd
}

const auditExample = `  # Webhooks in drascope-scheduler's write path, for pods in the current namespace
  kubectl dra webhooks audit

  # The same for pods in namespace ml-training; exit code 1 if one with
  # failurePolicy Fail can stop a write (for the CI of a cluster's config repo)
  kubectl dra webhooks audit -n ml-training`

func newWebhooksAuditCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "audit",
		Short: "List the admission webhooks that drascope-scheduler's writes reach",
		Long: `List every webhook of every ValidatingWebhookConfiguration and
MutatingWebhookConfiguration whose rules select one of drascope-scheduler's
writes, with its failurePolicy and timeoutSeconds, the writes that reach it,
and the writes its matchConditions already exclude. Rules are matched and
matchConditions evaluated with the apiserver's own code, for requests sent
by the ServiceAccount kube-system/drascope-scheduler, for pods in the
current namespace (-n). namespaceSelector and objectSelector are not
evaluated: a webhook with one is listed as if they matched.

Exit code 1 when a webhook with failurePolicy Fail (the default) is reached
by a write.`,
		Example: auditExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, client, err := clients(configFlags)
			if err != nil {
				return err
			}
			namespace, _, err := configFlags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			return audit(cmd.Context(), client, namespace, streams.Out)
		},
	}
}

// audit prints what webhooks.Audit finds, as a table; the error (exit
// code 1) says how many webhooks can make a scheduler write fail.
func audit(ctx context.Context, client kubernetes.Interface, namespace string, out io.Writer) error {
	validating, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ValidatingWebhookConfigurations: %w", err)
	}
	mutating, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing MutatingWebhookConfigurations: %w", err)
	}
	findings := webhooks.Audit(ctx, validating.Items, mutating.Items, namespace)
	return printAudit(out, findings)
}

// printAudit writes the findings as a table, with a footnote for webhooks
// whose selectors were not evaluated.
func printAudit(out io.Writer, findings []webhooks.Finding) error {
	tw := printers.GetNewTabWriter(out)
	fmt.Fprintln(tw, "KIND\tCONFIGURATION\tWEBHOOK\tFAILURE POLICY\tTIMEOUT\tREACHED BY\tEXCLUDED BY MATCHCONDITIONS")
	blocking, selectors := 0, false
	for _, f := range findings {
		if f.Blocks() {
			blocking++
		}
		name := f.Name
		if f.Selectors {
			name += "*"
			selectors = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%ds\t%s\t%s\n", f.Kind, f.Configuration, name, f.FailurePolicy, f.TimeoutSeconds,
			orNone(strings.Join(f.Reached, ", ")), orNone(strings.Join(f.Excluded, ", ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(findings) == 0 {
		fmt.Fprintln(out, "No admission webhook is reached by drascope-scheduler's writes.")
	}
	if selectors {
		fmt.Fprintln(out, "* has a namespaceSelector or objectSelector, not evaluated here.")
	}
	if blocking > 0 {
		return fmt.Errorf("%d webhook(s) with failurePolicy Fail sit in drascope-scheduler's write path; see kubectl dra webhooks exclude --help", blocking)
	}
	return nil
}

const excludeExample = `  # Keep drascope-scheduler's own writes away from every webhook of a configuration
  kubectl dra webhooks exclude --scheduler-critical --config policy-webhooks

  # Rules of your own, for one webhook, shown but not written
  kubectl dra webhooks exclude -f manifests/examples/webhook-exclusions.yaml \
      --config policy-webhooks --webhook pods.policy.example.com --dry-run=client -o yaml`

type excludeOptions struct {
	configFlags       *genericclioptions.ConfigFlags
	streams           genericiooptions.IOStreams
	printFlags        *genericclioptions.PrintFlags
	filename          string
	config            string
	kind              string
	webhook           string
	schedulerCritical bool
	schedulerUser     string
}

func newWebhooksExcludeCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &excludeOptions{configFlags: configFlags, streams: streams, printFlags: genericclioptions.NewPrintFlags("patched").WithTypeSetter(scheme.Scheme)}
	cmd := &cobra.Command{
		Use:   "exclude (-f FILENAME | --scheduler-critical) --config NAME [--webhook NAME] [--dry-run=client|server] [-o yaml]",
		Short: "Add exclusion rules to a webhook configuration, as CEL matchConditions",
		Long: `Read exclusion rules in the form of KEP-3693 (excludeResourceRules: a list of
apiGroups, apiVersions, operations, resources, scope, objectNames and
namespaces, and drascope's usernames; an empty list matches everything),
check them, compile each
into a matchCondition named drascope-exclude-..., and add them to the
webhooks of the named configuration. Existing matchConditions are kept; a
condition already there is not added twice; when a webhook would pass the
apiserver's limit of 64, the new conditions are merged into one.

Every expression is compiled with the apiserver's CEL environment for
webhook match conditions, and its cost checked against the apiserver's
budget, before anything is written. The configuration is patched at the
resourceVersion it was read at, so a concurrent edit makes this fail rather
than be overwritten. A rule that matches every request, and namespaces with
scope Cluster, are refused; so is KEP-3693's own example of a blanket
exclusion, every list "*" with resources ["*"].

Besides the KEP's fields, a rule may name usernames (request.userInfo.username):
the rules of --scheduler-critical exclude only drascope-scheduler's own
requests (--scheduler-user), so the same writes by anyone else still reach
the webhook. Only the matchConditions of the webhooks changed are sent (a
JSON patch), so fields this client does not know are kept.`,
		Example: excludeExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dryRun, err := cmdutil.GetDryRunStrategy(cmd)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), dryRun)
		},
	}
	cmd.Flags().StringVarP(&o.filename, "filename", "f", "", "File with the exclusion rules (- for standard input).")
	cmd.Flags().BoolVar(&o.schedulerCritical, "scheduler-critical", false, "Use the built-in rules for drascope-scheduler's own writes (manifests/examples/webhook-exclusions.yaml); they exclude only requests by --scheduler-user.")
	cmd.Flags().StringVar(&o.schedulerUser, "scheduler-user", webhooks.DefaultSchedulerUser, "The user drascope-scheduler authenticates as, for --scheduler-critical.")
	cmd.Flags().StringVar(&o.config, "config", "", "Name of the ValidatingWebhookConfiguration or MutatingWebhookConfiguration.")
	cmd.Flags().StringVar(&o.kind, "kind", "", "validating or mutating, when both kinds of configuration have that name.")
	cmd.Flags().StringVar(&o.webhook, "webhook", "", "Only this webhook of the configuration (default: all of them).")
	cmdutil.AddDryRunFlag(cmd)
	o.printFlags.AddFlags(cmd)
	return cmd
}

// rules reads and checks the rules; errors name the file and field.
func (o *excludeOptions) rules() ([]webhooks.ExclusionRule, string, error) {
	switch {
	case o.schedulerCritical && o.filename != "":
		return nil, "", fmt.Errorf("give either -f or --scheduler-critical, not both")
	case o.schedulerCritical:
		return webhooks.SchedulerCriticalRules(o.schedulerUser), "--scheduler-critical", nil
	case o.filename == "":
		return nil, "", fmt.Errorf("give the rules: -f FILENAME, or --scheduler-critical")
	}
	var data []byte
	var err error
	if o.filename == "-" {
		data, err = io.ReadAll(o.streams.In)
	} else {
		data, err = os.ReadFile(o.filename)
	}
	if err != nil {
		return nil, "", err
	}
	rules, err := webhooks.ParseRules(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", o.filename, err)
	}
	if errs := webhooks.ValidateRules(rules, field.NewPath("excludeResourceRules")); len(errs) > 0 {
		return nil, "", fmt.Errorf("%s: %w", o.filename, errs.ToAggregate())
	}
	return rules, o.filename, nil
}

func (o *excludeOptions) run(ctx context.Context, dryRun cmdutil.DryRunStrategy) error {
	if o.config == "" {
		return fmt.Errorf("name the webhook configuration: --config NAME")
	}
	rules, source, err := o.rules()
	if err != nil {
		return err
	}
	_, client, err := clients(o.configFlags)
	if err != nil {
		return err
	}
	target, err := o.find(ctx, client)
	if err != nil {
		return err
	}
	conditions := webhooks.Compile(rules)
	var changes []string
	// The resourceVersion read: a concurrent edit fails with a conflict.
	ops := []jsonPatchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: target.resourceVersion()}}
	for i, name := range target.names() {
		if o.webhook != "" && name != o.webhook {
			continue
		}
		existing := target.conditions(i)
		merged, err := webhooks.Merge(existing, conditions)
		if err != nil {
			return fmt.Errorf("%s, webhook %s: %w", target.describe(), name, err)
		}
		path := field.NewPath("webhooks").Index(i).Child("matchConditions")
		if errs := webhooks.Check(merged[len(existing):], rules, path, len(existing)); len(errs) > 0 {
			return fmt.Errorf("%s from %s: %w", target.describe(), source, errs.ToAggregate())
		}
		target.setConditions(i, merged)
		// Only this webhook's matchConditions, at the index read, and only
		// if that index still holds this webhook: fields this client does
		// not know (a newer apiserver's) are never sent back, so never lost.
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: name},
			jsonPatchOp{Op: "add", Path: fmt.Sprintf("/webhooks/%d/matchConditions", i), Value: merged})
		changes = append(changes, fmt.Sprintf("webhook %s: %d match condition(s) added", name, len(merged)-len(existing)))
	}
	if len(changes) == 0 && o.webhook != "" {
		return fmt.Errorf("%s has no webhook named %q", target.describe(), o.webhook)
	}
	if len(changes) == 0 {
		return fmt.Errorf("%s has no webhooks", target.describe())
	}

	if dryRun != cmdutil.DryRunClient {
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{}
		if dryRun == cmdutil.DryRunServer {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if err := target.patch(ctx, client, patch, opts); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsInvalid(err) && strings.Contains(err.Error(), "test") {
				return fmt.Errorf("%s changed while this ran; nothing was written, run it again: %w", target.describe(), err)
			}
			return fmt.Errorf("patching %s: %w", target.describe(), err)
		}
	}
	if o.printFlags.OutputFormat != nil && *o.printFlags.OutputFormat != "" {
		printer, err := o.printFlags.ToPrinter()
		if err != nil {
			return err
		}
		return printer.PrintObj(target.object(), o.streams.Out)
	}
	suffix := ""
	switch dryRun {
	case cmdutil.DryRunClient:
		suffix = " (dry run)"
	case cmdutil.DryRunServer:
		suffix = " (server dry run)"
	}
	for _, change := range changes {
		fmt.Fprintf(o.streams.Out, "%s: %s%s\n", target.describe(), change, suffix)
	}
	return nil
}

// configuration is a validating or a mutating webhook configuration.
type configuration struct {
	validating *admissionregistrationv1.ValidatingWebhookConfiguration
	mutating   *admissionregistrationv1.MutatingWebhookConfiguration
}

func (o *excludeOptions) find(ctx context.Context, client kubernetes.Interface) (*configuration, error) {
	var found []*configuration
	if o.kind == "" || o.kind == "validating" {
		v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, o.config, metav1.GetOptions{})
		if err == nil {
			found = append(found, &configuration{validating: v})
		} else if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	if o.kind == "" || o.kind == "mutating" {
		m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, o.config, metav1.GetOptions{})
		if err == nil {
			found = append(found, &configuration{mutating: m})
		} else if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	switch {
	case o.kind != "" && o.kind != "validating" && o.kind != "mutating":
		return nil, fmt.Errorf("--kind must be validating or mutating, not %q", o.kind)
	case len(found) == 0:
		return nil, fmt.Errorf("no webhook configuration named %q", o.config)
	case len(found) > 1:
		return nil, fmt.Errorf("both a validating and a mutating webhook configuration are named %q: choose one with --kind", o.config)
	}
	return found[0], nil
}

func (c *configuration) object() runtime.Object {
	if c.validating != nil {
		c.validating.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
		return c.validating
	}
	c.mutating.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"))
	return c.mutating
}

func (c *configuration) resourceVersion() string {
	if c.validating != nil {
		return c.validating.ResourceVersion
	}
	return c.mutating.ResourceVersion
}

func (c *configuration) describe() string {
	if c.validating != nil {
		return "validatingwebhookconfiguration/" + c.validating.Name
	}
	return "mutatingwebhookconfiguration/" + c.mutating.Name
}

func (c *configuration) names() []string {
	var names []string
	if c.validating != nil {
		for _, w := range c.validating.Webhooks {
			names = append(names, w.Name)
		}
	} else {
		for _, w := range c.mutating.Webhooks {
			names = append(names, w.Name)
		}
	}
	return names
}

func (c *configuration) conditions(i int) []admissionregistrationv1.MatchCondition {
	if c.validating != nil {
		return c.validating.Webhooks[i].MatchConditions
	}
	return c.mutating.Webhooks[i].MatchConditions
}

func (c *configuration) setConditions(i int, conditions []admissionregistrationv1.MatchCondition) {
	if c.validating != nil {
		c.validating.Webhooks[i].MatchConditions = conditions
	} else {
		c.mutating.Webhooks[i].MatchConditions = conditions
	}
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patch sends a JSON patch and keeps the server's answer.
func (c *configuration) patch(ctx context.Context, client kubernetes.Interface, patch []byte, opts metav1.PatchOptions) error {
	var err error
	if c.validating != nil {
		c.validating, err = client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, c.validating.Name, types.JSONPatchType, patch, opts)
	} else {
		c.mutating, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, c.mutating.Name, types.JSONPatchType, patch, opts)
	}
	return err
}
