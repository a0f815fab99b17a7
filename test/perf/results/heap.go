package results

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Heap is what a heap profile taken at the end of a run (after a garbage
// collection, with the workload's whole cluster in the caches) says about
// the live heap. scheduler_perf's peak heap is the whole process's, the
// in-process kube-apiserver's watch cache and garbage included; the
// scheduler's share is what a drascope-scheduler process holds.
type Heap struct {
	// ProcessMB is all the live heap the profile holds, in MB.
	ProcessMB float64 `json:"processMB"`
	// SchedulerMB is the live heap allocated under a frame of
	// SchedulerHeapCode and none of APIServerCode, in MB.
	SchedulerMB float64 `json:"schedulerMB"`
}

// SchedulerHeapCode are the packages whose frames make an allocation the
// scheduler's: SchedulerCode, and the client side of the informers (the
// reflector's lists and the watch decoder's objects), whose caches a
// scheduler process holds. The in-process apiserver's own few loopback
// informers (namespaces, service accounts) decode on the same path and are
// counted too, so this leans high.
// APIServerCode is left out of SchedulerHeapCode even where a frame of it
// matches: the apiserver's watch cache keeps its objects in client-go's
// stores and lists them with client-go's reflector.
var APIServerCode = []string{"k8s.io/apiserver/"}

var SchedulerHeapCode = append([]string{
	"k8s.io/client-go/tools/cache.",
	"k8s.io/apimachinery/pkg/watch.(*StreamWatcher)",
	"k8s.io/dynamic-resource-allocation/",
}, SchedulerCode...)

// ReadHeapProfile reads a heap profile written by runtime/pprof.
func ReadHeapProfile(path string) (Heap, error) {
	p, value, err := readProfile(path, "heap", "inuse_space", "bytes")
	if err != nil {
		return Heap{}, err
	}
	var h Heap
	for _, s := range p.Sample {
		mb := float64(s.Value[value]) / 1e6
		h.ProcessMB += mb
		if hasFrame(s, SchedulerHeapCode) && !hasFrame(s, APIServerCode) {
			h.SchedulerMB += mb
		}
	}
	return h, nil
}

// WriteSizing prints, for every run with a heap profile read, the figures a
// memory and CPU request is chosen from: the scheduler's live heap at the
// end of the run, the whole process's (live, and scheduler_perf's peak),
// and the cores the scheduler's code used while the measured pods were
// being scheduled (from the CPU profile: a lower bound, as SchedulerCode
// says).
func WriteSizing(w io.Writer, runs []Run) error {
	selected := runsWhere(runs, func(r Run) bool { return r.Heap.ProcessMB > 0 })
	if len(selected) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n| Workload | Pair | Scheduler | Scheduler live heap MB | Process live heap MB | Process peak heap MB | Scheduler cores, measured phase |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range selected {
		cores := math.NaN()
		if r.CPU.Seconds > 0 {
			cores = r.CPU.Scheduler / r.CPU.Seconds
		}
		fmt.Fprintf(&b, "| %s/%s | %d | %s | %s | %s | %s | %s |\n", r.TestCase, r.Workload, max(r.Pair, 1), r.Variant,
			num(r.Heap.SchedulerMB, 0), num(r.Heap.ProcessMB, 0), num(r.PeakHeapMB, 0), num(cores, 2))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
