package integration

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// waitForVictims waits until at least n pods were preempted.
func (s *scenario) waitForVictims(victims *preempted, n int) {
	s.t.Helper()
	if err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return len(victims.list()) >= n, nil
	}); err != nil {
		s.t.Fatalf("want %d pods preempted, got %v\n%s", n, victims.list(), s.preemptionTimeline())
	}
}

// settleTime is how long nothing may be preempted for the scenario to
// count as settled: longer than a preemptor's retry after its victims go.
const settleTime = 3 * time.Second

// settle waits until no pod has been preempted for settleTime.
func (s *scenario) settle(victims *preempted) {
	s.t.Helper()
	last, since := len(victims.list()), time.Now()
	_ = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, false, func(context.Context) (bool, error) {
		if n := len(victims.list()); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= settleTime, nil
	})
}

// schedulingEvent is one scheduler event of a scenario: a pod bound, a
// pod preempted, or a preemptor's choice of victims.
type schedulingEvent struct {
	at     time.Time
	reason string
	pod    string
	uid    string
	// node is where the pod was bound or preempted.
	node string
	// by is the preemptor's UID, for Preempted.
	by   string
	note string
}

var (
	scheduledNote = regexp.MustCompile(`^Successfully assigned [^/]+/\S+ to (\S+)`)
	preemptedNote = regexp.MustCompile(`^Preempted by pod (\S+) on node (\S+)`)
	// potentialPlacement is in a preemptor's FailedScheduling note when
	// it chose victims.
	potentialPlacement = regexp.MustCompile(`found a potential placement for pod on node (\S+),`)
)

// schedulingEvents returns the scenario's Scheduled, Preempted and
// FailedScheduling events, oldest first.
func (s *scenario) schedulingEvents() ([]schedulingEvent, error) {
	list, err := env.client.EventsV1().Events(s.namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var events []schedulingEvent
	for i := range list.Items {
		e := &list.Items[i]
		se := schedulingEvent{at: eventTime(e), reason: e.Reason, pod: e.Regarding.Name, uid: string(e.Regarding.UID), note: e.Note}
		switch e.Reason {
		case "Scheduled":
			if m := scheduledNote.FindStringSubmatch(e.Note); m != nil {
				se.node = m[1]
			}
		case "Preempted":
			if m := preemptedNote.FindStringSubmatch(e.Note); m != nil {
				se.by, se.node = m[1], m[2]
			}
		case "FailedScheduling":
		default:
			continue
		}
		events = append(events, se)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	return events, nil
}

func eventTime(e *eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	if e.DeprecatedLastTimestamp.Time.IsZero() {
		return e.CreationTimestamp.Time
	}
	return e.DeprecatedLastTimestamp.Time
}

// preemptionTimeline prints the scenario's scheduling events, for a
// failure message.
func (s *scenario) preemptionTimeline() string {
	events, err := s.schedulingEvents()
	if err != nil {
		return fmt.Sprintf("(listing events: %v)", err)
	}
	var b strings.Builder
	b.WriteString("events, oldest first:\n")
	for _, e := range events {
		note := e.note
		if len(note) > 200 {
			note = note[:200] + "..."
		}
		fmt.Fprintf(&b, "  %s %-16s %-12s %s\n", e.at.Format("15:04:05.000000"), e.reason, e.pod, note)
	}
	return b.String()
}
