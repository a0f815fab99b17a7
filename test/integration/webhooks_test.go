package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/pkg/webhooks"
)

// KEP-3693 through matchConditions: a webhook with failurePolicy Fail in the
// scheduler's write path is found by audit (exit code 1) and, after
// exclude --scheduler-critical, no longer sees the binding or the claim
// status of a DRA pod, while an ordinary pod's creation still reaches it.
func TestWebhookExclusion(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 4)
	s.addClaimTemplate("gpu", false)
	hook := startCountingWebhook(t)
	config := s.namespace + "-policy"
	s.addCountingWebhookConfig(hook, config)
	s.waitForWebhookConfig(hook, node, true)
	hook.take()

	s.addPod("before", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("before")
	before := hook.take()
	if before["CREATE pods/binding"] != 1 || before["UPDATE resourceclaims/status"] < 1 {
		t.Fatalf("scheduling a DRA pod sent the webhook %s; want its binding and its claim status", describeCalls(before))
	}

	out, _, err := kubectlDRA(t, "webhooks", "audit", "-n", s.namespace)
	t.Logf("kubectl dra webhooks audit -n %s (before):\n%s", s.namespace, out)
	if err == nil || !strings.Contains(err.Error(), "1 webhook(s) with failurePolicy Fail") {
		t.Errorf("audit before exclusion: error %v, want one blocking webhook", err)
	}
	if findLine(out, "Validating", config, "count.drascope.test*", "Fail", "5s", "CREATE", "pods/binding,", "UPDATE", "resourceclaims/status.resource.k8s.io", "<none>") == nil {
		t.Errorf("audit does not list the webhook with the writes that reach it:\n%s", out)
	}
	if code, out := runAsAdmin(t, "kubectl-dra", "webhooks", "audit", "-n", s.namespace); code != 1 {
		t.Errorf("bin/kubectl-dra webhooks audit exit code %d, want 1:\n%s", code, out)
	}

	// Dry runs, on either side, write nothing.
	out, _, err = kubectlDRA(t, "webhooks", "exclude", "--scheduler-critical", "--config", config, "--dry-run=client", "-o", "yaml")
	if err != nil || !strings.Contains(out, "kind: ValidatingWebhookConfiguration") || strings.Count(out, "name: drascope-exclude-") != len(webhooks.SchedulerCriticalRules(webhooks.DefaultSchedulerUser)) {
		t.Errorf("exclude --dry-run=client -o yaml: %v\n%s", err, out)
	}
	if out, _, err = kubectlDRA(t, "webhooks", "exclude", "--scheduler-critical", "--config", config, "--dry-run=server"); err != nil || !strings.Contains(out, "(server dry run)") {
		t.Errorf("exclude --dry-run=server: %v\n%s", err, out)
	}
	if got, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, config, metav1.GetOptions{}); err != nil || len(got.Webhooks[0].MatchConditions) != 0 {
		t.Fatalf("a dry run changed the configuration: %v", err)
	}

	out, _, err = kubectlDRA(t, "webhooks", "exclude", "--scheduler-critical", "--config", config)
	if err != nil {
		t.Fatalf("exclude: %v", err)
	}
	if want := fmt.Sprintf("validatingwebhookconfiguration/%s: webhook count.drascope.test: %d match condition(s) added", config, len(webhooks.SchedulerCriticalRules(webhooks.DefaultSchedulerUser))); !strings.Contains(out, want) {
		t.Errorf("exclude printed %q, want %q", out, want)
	}
	s.waitForWebhookConfig(hook, node, false)
	// The exclusions are drascope-scheduler's only: the same write by
	// anyone else still reaches the webhook.
	if !s.probeBindingAs(hook, node, env.client) {
		t.Errorf("after exclude --scheduler-critical, a binding by an administrator no longer reaches the webhook")
	}
	hook.take()

	s.addPod("after", schedulerName, fromTemplate("gpu"))
	s.waitForPodScheduled("after")
	s.addPlainPod("ordinary")
	after := hook.take()
	if after["CREATE pods/binding"] != 0 || after["UPDATE resourceclaims/status"] != 0 {
		t.Errorf("after exclusion, scheduling a DRA pod still sent the webhook %s", describeCalls(after))
	}
	if after["CREATE pods"] != 2 {
		t.Errorf("after exclusion, creating two pods sent the webhook %s; want 2 CREATE pods", describeCalls(after))
	}
	t.Logf("webhook calls caused by one DRA pod: before exclusion %d (%s), after %d (%s)",
		total(before), describeCalls(before), total(after)-1, describeCalls(after))

	out, _, err = kubectlDRA(t, "webhooks", "audit", "-n", s.namespace)
	t.Logf("kubectl dra webhooks audit -n %s (after):\n%s", s.namespace, out)
	if err != nil {
		t.Errorf("audit after exclusion: %v", err)
	}
	if line := findLine(out, "Validating", config, "count.drascope.test*", "Fail", "5s", "<none>", "CREATE", "pods/binding"); line == nil ||
		!strings.Contains(strings.Join(line, " "), "(drascope-exclude-pods-binding-create-") ||
		!strings.Contains(strings.Join(line, " "), "UPDATE resourceclaims/status.resource.k8s.io (drascope-exclude-resourceclaims-status-update-") {
		t.Errorf("audit does not show the writes excluded:\n%s", out)
	}
	if code, out := runAsAdmin(t, "kubectl-dra", "webhooks", "audit", "-n", s.namespace); code != 0 {
		t.Errorf("bin/kubectl-dra webhooks audit exit code %d after exclusion, want 0:\n%s", code, out)
	}
}

// Rules that would switch a webhook off, or make no sense, or that the
// apiserver's CEL environment would not compile, are refused with the field
// path, and nothing is written.
func TestWebhookExclusionRefusals(t *testing.T) {
	s := newScenario(t, nil)
	hook := startCountingWebhook(t)
	config := s.namespace + "-policy"
	s.addCountingWebhookConfig(hook, config)

	var huge strings.Builder
	huge.WriteString("excludeResourceRules:\n- resources: [configmaps]\n  objectNames:\n")
	for i := range 2000 {
		fmt.Fprintf(&huge, "  - %s-%05d\n", strings.Repeat("n", 50), i)
	}
	for name, tc := range map[string]struct{ rules, want string }{
		"everything":          {rules: "excludeResourceRules:\n- {}\n", want: `excludeResourceRules[0]: Invalid value: "every request": an exclusion that matches every request`},
		"namespaces, Cluster": {rules: "excludeResourceRules:\n- resources: [nodes]\n  scope: Cluster\n  namespaces: [kube-system]\n", want: "excludeResourceRules[0].namespaces: Forbidden"},
		"would not compile":   {rules: huge.String(), want: "webhooks[0].matchConditions[0].expression: Invalid value"},
		"misspelt field":      {rules: "excludeResourceRules:\n- resource: [pods]\n", want: `unknown field "resource"`},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(file, []byte(tc.rules), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := kubectlDRA(t, "webhooks", "exclude", "-f", file, "--config", config)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %.400v, want one containing %q", err, tc.want)
			}
			got, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, config, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(got.Webhooks[0].MatchConditions); n != 0 {
				t.Errorf("a refused exclusion wrote %d match conditions", n)
			}
		})
	}
}

// The webhook's own match conditions are kept and still apply, including
// one that reads the object, which exclude cannot evaluate and must not
// refuse for that.
func TestWebhookExclusionKeepsExistingConditions(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 1)
	hook := startCountingWebhook(t)
	config := s.namespace + "-policy"
	skip := admissionregistrationv1.MatchCondition{
		Name:       "skip-labelled",
		Expression: `!has(object.metadata.labels) || !("policy.example.com/skip" in object.metadata.labels)`,
	}
	s.addCountingWebhookConfig(hook, config, skip)
	if _, _, err := kubectlDRA(t, "webhooks", "exclude", "--scheduler-critical", "--config", config); err != nil {
		t.Fatalf("exclude: %v", err)
	}
	got, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, config, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := len(webhooks.SchedulerCriticalRules(webhooks.DefaultSchedulerUser))
	if conditions := got.Webhooks[0].MatchConditions; len(conditions) != 1+want || conditions[0] != skip {
		t.Fatalf("match conditions %+v; want %s kept first, then %d of drascope's", conditions, skip.Name, want)
	}
	s.waitForWebhookConfig(hook, node, false)
	hook.take()

	s.addPlainPod("checked")
	skipped := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "skipped", Labels: map[string]string{"policy.example.com/skip": "true"}},
		Spec:       v1.PodSpec{SchedulerName: "nobody", Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := env.client.CoreV1().Pods(s.namespace).Create(s.ctx, skipped, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if calls := hook.take(); calls["CREATE pods"] != 1 {
		t.Errorf("creating a plain and a labelled pod sent the webhook %s; want the plain one only", describeCalls(calls))
	}
}

// A webhook with failurePolicy Fail on claim updates that is down blocks
// every DRA binding: upstream's PreBind UPDATEs the claim (its finalizer)
// before it writes the allocation. audit names it and exits non-zero;
// after exclude --scheduler-critical the pod binds, and an administrator's
// update of a claim is still refused, as the webhook's owner meant.
func TestDownWebhookOnClaimUpdates(t *testing.T) {
	s := newScenario(t, nil)
	s.addNode("gpus", 4)
	s.addClaimTemplate("gpu", false)
	probe, err := env.client.ResourceV1().ResourceClaims(s.namespace).Create(s.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: deviceClassName},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	config := s.namespace + "-down"
	if _, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(s.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: config},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "claims.drascope.test",
			// Nothing listens there: the webhook is down.
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d/validate", port))},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](2),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.namespace}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceclaims"}},
			}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), config, metav1.DeleteOptions{})
	})
	// The apiserver loads webhook configurations asynchronously: probe
	// with a label change of the probe claim until it takes effect.
	touch := func(client kubernetes.Interface) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			claim, err := client.ResourceV1().ResourceClaims(s.namespace).Get(s.ctx, probe.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if claim.Labels == nil {
				claim.Labels = map[string]string{}
			}
			claim.Labels["touched"] = strconv.FormatInt(time.Now().UnixNano(), 10)
			_, err = client.ResourceV1().ResourceClaims(s.namespace).Update(s.ctx, claim, metav1.UpdateOptions{})
			return err
		})
	}
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "failed calling webhook") }
	waitFor := func(what string, client kubernetes.Interface, wantRefused bool) {
		t.Helper()
		var last error
		if err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			last = touch(client)
			return refused(last) == wantRefused && (wantRefused || last == nil), nil
		}); err != nil {
			t.Fatalf("%s: the last claim update: %v", what, last)
		}
	}
	waitFor("the webhook never refused a claim update", env.client, true)

	out, _, err := kubectlDRA(t, "webhooks", "audit", "-n", s.namespace)
	t.Logf("kubectl dra webhooks audit -n %s (before):\n%s", s.namespace, out)
	if err == nil || !strings.Contains(err.Error(), "failurePolicy Fail") {
		t.Errorf("audit before exclusion: error %v, want a blocking webhook", err)
	}
	if findLine(out, "Validating", config, "claims.drascope.test*", "Fail", "2s", "UPDATE", "resourceclaims.resource.k8s.io") == nil {
		t.Errorf("audit does not name the webhook with the claim update that reaches it:\n%s", out)
	}

	s.addPod("blocked", schedulerName, fromTemplate("gpu"))
	s.waitForPodNotScheduled("blocked")
	if pod := s.getPod("blocked"); !strings.Contains(describeScheduling(pod), "webhook") {
		t.Errorf("pod blocked: %s; want the webhook named", describeScheduling(pod))
	}

	if _, _, err := kubectlDRA(t, "webhooks", "exclude", "--scheduler-critical", "--config", config); err != nil {
		t.Fatalf("exclude: %v", err)
	}
	waitFor("after exclusion, the scheduler's claim update is still refused", asScheduler(t), false)
	s.waitForPodScheduled("blocked")
	if err := touch(env.client); !refused(err) {
		t.Errorf("after exclusion, an administrator's claim update: %v; want it refused by the webhook that is down", err)
	}
	if code, out := runAsAdmin(t, "kubectl-dra", "webhooks", "audit", "-n", s.namespace); code != 0 {
		t.Errorf("bin/kubectl-dra webhooks audit exit code %d after exclusion, want 0:\n%s", code, out)
	}
}
