package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/drascope/drascope/pkg/webhooks"
)

// auditPolicy logs every request of drascope-scheduler's ServiceAccount,
// and nothing else, once, when its response is complete: the record of
// what the scheduler asks of the apiserver, for the tests that count its
// requests and list its writes. A watch is logged when it ends.
var auditPolicy = fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: [%q]
- level: None
`, webhooks.DefaultSchedulerUser)

// schedulerRequests returns the scheduler's requests that the apiserver
// received at or after since, in the order it received them.
func schedulerRequests(t *testing.T, since time.Time) []auditv1.Event {
	t.Helper()
	events, err := readSchedulerRequests(since)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func readSchedulerRequests(since time.Time) ([]auditv1.Event, error) {
	f, err := os.Open(env.cp.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	var events []auditv1.Event
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for lines.Scan() {
		var e auditv1.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log line %q: %w", lines.Text(), err)
		}
		if e.User.Username == webhooks.DefaultSchedulerUser && !e.RequestReceivedTimestamp.Time.Before(since) {
			events = append(events, e)
		}
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	slices.SortStableFunc(events, func(a, b auditv1.Event) int {
		return a.RequestReceivedTimestamp.Time.Compare(b.RequestReceivedTimestamp.Time)
	})
	return events, nil
}

// checkSchedulerWrites reads every write the scheduler's user made in the
// whole run (binding, preemption, gangs, health taints, publishing,
// leader election: the scenarios that ran) and checks each
// against pkg/webhooks: its kind must be one SchedulerWrites lists, for
// audit, and the exclusions of --scheduler-critical must keep it from a
// webhook that matches everything. It returns what it found, one line per
// kind of write with its count, and an error naming the writes the list
// lacks. Writes the apiserver refused before admission (401, 403: RBAC
// tests probe those) are left out: no webhook sees them.
func checkSchedulerWrites(ctx context.Context) (string, error) {
	events, err := readSchedulerRequests(time.Time{})
	if err != nil {
		return "", err
	}
	listed := map[string]bool{}
	for _, r := range webhooks.SchedulerWrites("any") {
		listed[r.Label()] = true
	}
	fail := admissionregistrationv1.Fail
	everything := webhooks.Webhook{
		FailurePolicy: &fail,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
		}},
		MatchConditions: webhooks.Compile(webhooks.SchedulerCriticalRules(webhooks.DefaultSchedulerUser)),
	}
	seen := map[string]int{}
	var missing []string
	for _, e := range events {
		if !isWrite(e) || e.ObjectRef == nil || (e.ResponseStatus != nil && (e.ResponseStatus.Code == 401 || e.ResponseStatus.Code == 403)) {
			continue
		}
		r := admissionRequest(e)
		label := r.Label()
		if seen[label]++; seen[label] > 1 {
			continue
		}
		if !listed[label] {
			missing = append(missing, label+": not in webhooks.SchedulerWrites")
		}
		if v := everything.Reaches(ctx, r); v.Reaches {
			missing = append(missing, fmt.Sprintf("%s: not excluded by webhooks.SchedulerCriticalRules (%+v)", r, v))
		}
	}
	var report strings.Builder
	for _, label := range slices.Sorted(maps.Keys(seen)) {
		fmt.Fprintf(&report, "%7d %s\n", seen[label], label)
	}
	if len(missing) > 0 {
		return report.String(), fmt.Errorf("drascope-scheduler made writes pkg/webhooks does not know:\n  %s", strings.Join(missing, "\n  "))
	}
	return report.String(), nil
}

// admissionRequest is the audited request as admission sees it: a PATCH
// is an UPDATE, a collection deletion a DELETE.
func admissionRequest(e auditv1.Event) webhooks.Request {
	operation := map[string]admissionregistrationv1.OperationType{
		"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update, "patch": admissionregistrationv1.Update,
		"delete": admissionregistrationv1.Delete, "deletecollection": admissionregistrationv1.Delete,
	}[e.Verb]
	ref := e.ObjectRef
	return webhooks.Request{
		Resource:    schema.GroupVersionResource{Group: ref.APIGroup, Version: ref.APIVersion, Resource: ref.Resource},
		SubResource: ref.Subresource, Operation: operation, Namespace: ref.Namespace, Name: ref.Name, User: e.User.Username,
	}
}

// writeVerbs are the verbs of requests that change objects, which
// admission webhooks see.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

func isWrite(e auditv1.Event) bool { return slices.Contains(writeVerbs, e.Verb) }

// requestKind names the kind of a request, without its object:
// "update resource.k8s.io/resourceclaims/status".
func requestKind(e auditv1.Event) string {
	if e.ObjectRef == nil {
		return e.Verb + " " + e.RequestURI
	}
	resource := e.ObjectRef.Resource
	if e.ObjectRef.APIGroup != "" {
		resource = e.ObjectRef.APIGroup + "/" + resource
	}
	if e.ObjectRef.Subresource != "" {
		resource += "/" + e.ObjectRef.Subresource
	}
	return e.Verb + " " + resource
}

// client names the client of the scheduler process that sent a request,
// from the last part of its user agent: "scheduler" (upstream's clients,
// events included), "resourcepools", "leader-election"; "default" when
// the agent names none.
func client(e auditv1.Event) string {
	agent := e.UserAgent
	if i := strings.Index(agent, " kubernetes/"); i >= 0 {
		agent = agent[i+len(" kubernetes/"):]
	}
	if _, suffix, ok := strings.Cut(agent, "/"); ok {
		return suffix
	}
	return "default"
}
