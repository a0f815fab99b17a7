package results

import (
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

// CPU is what a CPU profile of a measured phase says about where the
// process's CPU went. scheduler_perf runs the apiserver, etcd's client, the
// controllers and the scheduler in one process, and on 2 shared cores
// throughput mostly measures the apiserver; the scheduler's share is what
// the scheduler itself costs.
type CPU struct {
	// Seconds is the profile's wall time.
	Seconds float64 `json:"seconds"`
	// Process is all the CPU the profile sampled, in seconds.
	Process float64 `json:"process"`
	// Scheduler is the CPU of samples with a scheduler frame on the stack
	// (SchedulerCode), in seconds.
	Scheduler float64 `json:"scheduler"`
}

// SchedulerCode are the packages whose frames make a sample the
// scheduler's: the scheduler (queue, cache, framework, in-tree plugins, the
// event handlers its informers call) and drascope (DRAScope, its side
// cache, health cache and ResourcePool publisher). Left out, so a lower
// bound: client-go's decoding of the watch events the scheduler's informers
// receive, shared with the controllers' informers, and garbage collection.
var SchedulerCode = []string{"k8s.io/kubernetes/pkg/scheduler", "github.com/drascope/drascope/pkg/"}

// ReadCPUProfile reads a CPU profile written by runtime/pprof.
func ReadCPUProfile(path string) (CPU, error) {
	p, value, err := readProfile(path, "CPU", "cpu", "nanoseconds")
	if err != nil {
		return CPU{}, err
	}
	cpu := CPU{Seconds: float64(p.DurationNanos) / 1e9}
	for _, s := range p.Sample {
		ns := float64(s.Value[value])
		cpu.Process += ns / 1e9
		if hasFrame(s, SchedulerCode) {
			cpu.Scheduler += ns / 1e9
		}
	}
	return cpu, nil
}

// readProfile reads a profile written by runtime/pprof, and finds the
// index of its values of the given sample type; kind names the profile in
// the error when it has none.
func readProfile(path, kind, sampleType, unit string) (*profile.Profile, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	for i, st := range p.SampleType {
		if st.Type == sampleType && st.Unit == unit {
			return p, i, nil
		}
	}
	return nil, 0, fmt.Errorf("%s: not a %s profile (no %s/%s sample type)", path, kind, sampleType, unit)
}

// hasFrame says whether a frame of the sample's stack is a function whose
// name starts with one of prefixes.
func hasFrame(s *profile.Sample, prefixes []string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			for _, prefix := range prefixes {
				if strings.HasPrefix(line.Function.Name, prefix) {
					return true
				}
			}
		}
	}
	return false
}

// scheduledPods estimates the pods scheduled while profiling: the average
// throughput over the profile's time. NaN without either.
func (r Run) scheduledPods() float64 {
	if r.CPU.Seconds == 0 || math.IsNaN(r.Throughput.Average) {
		return math.NaN()
	}
	return r.Throughput.Average * r.CPU.Seconds
}

// SchedulerCPUPerPod is the scheduler's CPU per scheduled pod, in ms.
func (r Run) SchedulerCPUPerPod() float64 {
	return 1000 * r.CPU.Scheduler / r.scheduledPods()
}

// ProcessCPUPerPod is the whole process's CPU per scheduled pod, in ms.
func (r Run) ProcessCPUPerPod() float64 {
	return 1000 * r.CPU.Process / r.scheduledPods()
}
