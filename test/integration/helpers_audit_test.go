package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

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
	f, err := os.Open(env.cp.AuditLog)
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	defer f.Close()
	var events []auditv1.Event
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for lines.Scan() {
		var e auditv1.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %q: %v", lines.Text(), err)
		}
		if e.User.Username == webhooks.DefaultSchedulerUser && !e.RequestReceivedTimestamp.Time.Before(since) {
			events = append(events, e)
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	slices.SortStableFunc(events, func(a, b auditv1.Event) int {
		return a.RequestReceivedTimestamp.Time.Compare(b.RequestReceivedTimestamp.Time)
	})
	return events
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
