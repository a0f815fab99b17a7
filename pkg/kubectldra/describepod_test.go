package kubectldra

import (
	"bytes"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/pkg/whypending"
)

// The report prints as kubectl describe prints an object: aligned keys,
// nested claims and requests, the conclusion, notes, the scheduler's
// message and the events last.
func TestPrintPodReport(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train-0"}}
	r := &whypending.Report{
		Pod: "team-a/train-0",
		Claims: []whypending.ClaimReport{
			{Name: "gpus", ResourceClaim: "team-a/train-0-gpus", Requests: []whypending.RequestReport{{
				Name: "gpu", DeviceClass: "gpu.example.com", AllocationMode: "ExactCount", Count: 4,
				Selectors: []string{`device.attributes["gpu.example.com"].model == "a100"`},
				Verdict: &whypending.Verdict{Need: 4, NodesWithMatching: 2, MostFree: 3, NodesWithMostFree: 1,
					Devices: whypending.DeviceCounts{Matching: 8, Free: 5, Allocated: 3, HeldByLowerPriority: 1}},
			}}, Constraints: []string{"matchAttribute gpu.example.com/numa over all requests"}},
			{Name: "scratch", Missing: true},
		},
		Fit:              &whypending.FitReport{},
		Closest:          []whypending.NodeReport{{Node: "node-a", Lacks: []string{"gpu: 3 free of 4 needed (1 allocated)"}}},
		Conclusion:       "claim team-a/train-0-gpus, request gpu needs 4 × gpu.example.com on one node",
		Notes:            []string{"listing Pods is not permitted: devices held by pods of lower priority are not counted"},
		SchedulerMessage: "0/2 nodes are available: cannot allocate all claims",
	}
	var out bytes.Buffer
	if err := printPodReport(&out, pod, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, want := range [][]string{
		{"Name:", "train-0"},
		{"Node:", "<none>"},
		{"gpus:", "team-a/train-0-gpus"},
		{"Allocated:", "no"},
		{"Request", "gpu:"},
		{"Count:", "4"},
		{"Verdict:", "2", "nodes", "with", "matching", "devices,", "0", "with", "4", "free;", "most", "free", "on", "one", "node:", "3", "(on", "1", "node)"},
		{"Devices:", "8", "matching:", "5", "free,", "3", "allocated", "(1", "by", "pods", "of", "lower", "priority),"},
		{"Constraint:", "matchAttribute"},
		{"scratch:", "not", "created", "yet"},
		{"Fits", "on:", "no", "node", "(the", "allocator", "was", "asked", "about", "0)"},
		{"node-a:", "gpu:", "3", "free", "of", "4", "needed", "(1", "allocated)"},
		{"Conclusion:", "claim"},
		{"Notes:", "listing", "Pods"},
		{"Scheduler:", "0/2"},
		{"Events:", "<none>"},
	} {
		if findLine(out.String(), want...) == nil {
			t.Errorf("no line starting %q", want)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if strings.Join(strings.Fields(lines[len(lines)-1]), " ") != "Events: <none>" {
		t.Errorf("the events are not last")
	}
}

// findLine returns the first output line whose fields start with prefix.
func findLine(out string, prefix ...string) []string {
	for _, line := range strings.Split(out, "\n") {
		row := strings.Fields(line)
		if len(row) >= len(prefix) && strings.Join(row[:len(prefix)], " ") == strings.Join(prefix, " ") {
			return row
		}
	}
	return nil
}
