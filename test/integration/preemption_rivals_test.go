package integration

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Preemption beside other pending pods (issue: "a queued pod of equal
// priority makes preemption evict more pods than needed"). The devices a
// preemptor's victims free are the preemptor's: a pod of equal or lower
// priority that is pending at the same time must not take them, however
// their release interleaves with its retries, and the preemptor must not
// need a second round of victims. docs/preemption.md, "The devices stay
// the preemptor's", says how.

// rivalsCase is one run of the scenario: two nodes of four GPUs,
// all held by one-GPU pods of priority 10; then pods that cannot preempt
// (rivals) and pods that can (preemptors), one second apart.
type rivalsCase struct {
	rivals []rival
	// preemptors ask for 2 GPUs each, at priority 1000.
	preemptors int
	// late are one-GPU pods of priority 500 that may preempt, created
	// once the first preemptor has its victims.
	late int
}

type rival struct {
	priority int32
	// higher is set when the rival outranks the preemptors: it may take a
	// device their victims freed, as upstream allows.
	higher bool
}

const rivalsPreemptorPriority = 1000

func TestPreemptionBesidePendingPods(t *testing.T) {
	for _, tc := range []struct {
		name string
		rivalsCase
	}{
		// The scenario.
		{"never pod of equal priority", rivalsCase{rivals: []rival{{priority: 1000}}, preemptors: 1}},
		{"never pod of lower priority", rivalsCase{rivals: []rival{{priority: 500}}, preemptors: 1}},
		{"never pod of higher priority", rivalsCase{rivals: []rival{{priority: 2000, higher: true}}, preemptors: 1}},
		{"two preemptors and three never pods", rivalsCase{rivals: []rival{{priority: 1000}, {priority: 1000}, {priority: 500}}, preemptors: 2}},
		{"a lower-priority preemptor arrives while the first waits", rivalsCase{preemptors: 1, late: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) { runRivalsCase(t, tc.rivalsCase) })
	}
}

func runRivalsCase(t *testing.T, tc rivalsCase) {
	s := newScenario(t, nil)
	low := s.priorityClass("low", 10)
	urgent := s.priorityClass("urgent", rivalsPreemptorPriority)
	middle := s.priorityClass("middle", 500)
	victims := s.playKubelet()
	s.addNode("1", 4)
	s.addNode("2", 4)
	s.addClaimTemplate("gpu", false)
	s.addClaimTemplateForCount("two-gpus", 2)
	for i := range 8 {
		s.addPodWith(fmt.Sprintf("low-%d", i), schedulerName, fromTemplate("gpu"), withPriorityClass(low))
	}
	for i := range 8 {
		s.waitForPodScheduled(fmt.Sprintf("low-%d", i))
	}

	classes := map[int32]string{}
	for i, r := range tc.rivals {
		class, ok := classes[r.priority]
		if !ok {
			class = s.priorityClass(fmt.Sprintf("never-%d", r.priority), r.priority, v1.PreemptNever)
			classes[r.priority] = class
		}
		s.addPodWith(fmt.Sprintf("never-%d", i), schedulerName, fromTemplate("gpu"), withPriorityClass(class))
	}
	// The rivals are queued, refused, before the preemptors come.
	for i := range tc.rivals {
		s.waitForPodUnschedulable(fmt.Sprintf("never-%d", i))
	}
	for i := range tc.preemptors {
		s.addPodWith(fmt.Sprintf("urgent-%d", i), schedulerName, fromTemplate("two-gpus"), withPriorityClass(urgent))
	}
	if tc.late > 0 {
		s.waitForVictims(victims, 1)
		for i := range tc.late {
			s.addPodWith(fmt.Sprintf("late-%d", i), schedulerName, fromTemplate("gpu"), withPriorityClass(middle))
		}
	}

	need := 2 * tc.preemptors
	for i := range tc.preemptors {
		s.waitForPodScheduled(fmt.Sprintf("urgent-%d", i))
	}
	for i := range tc.late {
		s.waitForPodScheduled(fmt.Sprintf("late-%d", i))
		need++
	}
	// A rival of higher priority may take a freed GPU; the preemptors
	// then need one more victim each time it does.
	for i, r := range tc.rivals {
		if r.higher && s.getPod(fmt.Sprintf("never-%d", i)).Spec.NodeName != "" {
			need++
		}
	}
	// Give an extra preemption time to happen before counting.
	s.settle(victims)
	if gone := victims.list(); len(gone) != need {
		t.Errorf("preempted %d pods %v, want exactly %d: the GPUs the preemptors and the pods that outrank them need\n%s", len(gone), gone, need, s.preemptionTimeline())
	}
	for i, r := range tc.rivals {
		name := fmt.Sprintf("never-%d", i)
		pod, err := env.client.CoreV1().Pods(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
		switch {
		case isNotFound(err):
			// Bound by mistake, then preempted by a preemptor that needed
			// its GPU back.
			t.Errorf("%s (priority %d) was bound and then preempted\n%s", name, r.priority, s.preemptionTimeline())
		case err != nil:
			t.Fatal(err)
		case !r.higher && pod.Spec.NodeName != "":
			t.Errorf("%s (priority %d, preemptionPolicy Never) took a GPU on %s that victims freed for a preemptor of priority %d\n%s",
				name, r.priority, pod.Spec.NodeName, rivalsPreemptorPriority, s.preemptionTimeline())
		}
	}
}
