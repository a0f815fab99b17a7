package perf

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/internal/proccpu"
	dsmetrics "github.com/drascope/drascope/pkg/metrics"
)

// writeWindow counts the ResourcePool writes made inside a run's measured
// window, and the CPU the harness's process and etcd spent in it: from the
// first measured pod's creation to the last measured pod's binding, as the
// harness's informer sees them. scheduler_perf's collectors
// read histograms only, and the whole-run counter also holds the set-up's
// first publication and the settle step's writes, which are not what the
// scheduling throughput paid for.
type writeWindow struct {
	mu sync.Mutex
	// samples are the writes counter, read every samplePeriod.
	samples []counterSample
	// first and last bound the window: the first measured pod's creation
	// and the last binding seen; zero until seen.
	first, last time.Time
	// bound are the pods seen bound, so that later events of a bound pod
	// (its deletion in steady state) do not stretch the window.
	bound map[types.UID]bool
}

type counterSample struct {
	at     time.Time
	writes float64
	// floor is the write floor counter (drascope_resourcepool_write_floor_total).
	floor float64
	// process and etcd are the CPU seconds the harness's process and its
	// etcd had spent by then (proccpu); etcd is 0 without one.
	process, etcd float64
	// delays is the publish delay histogram
	// (drascope_resourcepool_publish_delay_seconds).
	delays buckets
}

const samplePeriod = 100 * time.Millisecond

// watchWriteWindow samples the writes counter and watches the pods of
// namespace until ctx ends.
func watchWriteWindow(ctx context.Context, client kubernetes.Interface, namespace string) *writeWindow {
	w := &writeWindow{bound: map[types.UID]bool{}}
	self, etcd := os.Getpid(), proccpu.Child("etcd")
	go func() {
		ticker := time.NewTicker(samplePeriod)
		defer ticker.Stop()
		for {
			sample, err := sampleNow(self, etcd)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Sampling ResourcePool writes and CPU")
			} else {
				w.mu.Lock()
				w.samples = append(w.samples, sample)
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace))
	note := func(obj any) {
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.first.IsZero() {
			w.first = now
		}
		if pod.Spec.NodeName != "" && !w.bound[pod.UID] {
			w.bound[pod.UID] = true
			w.last = now
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    note,
		UpdateFunc: func(_, obj any) { note(obj) },
	})
	factory.Start(ctx.Done())
	return w
}

// sampleNow reads the writes counter and the CPU the harness's process and
// etcd (pid 0: none) have spent.
func sampleNow(self, etcd int) (counterSample, error) {
	s := counterSample{at: time.Now()}
	var err error
	if s.writes, err = writesSoFar(); err != nil {
		return s, err
	}
	if s.floor, err = testutil.GetCounterMetricValue(dsmetrics.WriteFloor.WithLabelValues()); err != nil {
		return s, err
	}
	if s.delays, err = observerBuckets(dsmetrics.PublishDelay.WithLabelValues()); err != nil {
		return s, err
	}
	if s.process, err = proccpu.Seconds(self); err != nil {
		return s, err
	}
	if etcd != 0 {
		if s.etcd, err = proccpu.Seconds(etcd); err != nil {
			return s, err
		}
	}
	return s, nil
}

// writesSoFar reads the publisher's write counter itself. Gathering the
// whole registry ten times a second, as counterSum does, would run every
// collector with it, DRAScope's per-pool collector included, in the
// scheduler's process while it is measured.
func writesSoFar() (float64, error) {
	sum := 0.0
	for _, verb := range []string{"create", "update", "delete"} {
		n, err := testutil.GetCounterMetricValue(dsmetrics.Writes.WithLabelValues(verb))
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// observerBuckets reads one histogram's buckets, as writesSoFar reads its
// counters: without gathering the registry.
func observerBuckets(m metrics.ObserverMetric) (buckets, error) {
	pb := &dto.Metric{}
	metric, ok := m.(metrics.Metric)
	if !ok {
		return buckets{}, fmt.Errorf("%T is not a metric", m)
	}
	if err := metric.Write(pb); err != nil {
		return buckets{}, err
	}
	var b buckets
	b.add(pb.GetHistogram())
	return b, nil
}

// windowTotals is what the measured window cost: the publisher's writes
// and their floor, and the CPU seconds of the harness's process and of
// etcd; and the publish delays of the writes inside it.
type windowTotals struct {
	writes, floor int
	process, etcd float64
	length        time.Duration
	delays        buckets
}

// totals returns what the window cost, and its length; zero when no
// measured pod was bound.
func (w *writeWindow) totals() windowTotals {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() || w.last.IsZero() || len(w.samples) == 0 {
		return windowTotals{}
	}
	// The last sample at or before the start, and the first at or after the
	// end: each count errs by at most one period on each side (more where
	// a sample failed), towards more.
	start, end := w.samples[0], w.samples[len(w.samples)-1]
	endSet := false
	for _, s := range w.samples {
		if !s.at.After(w.first) {
			start = s
		}
		if !endSet && !s.at.Before(w.last) {
			end, endSet = s, true
		}
	}
	length := w.last.Sub(w.first)
	// The CPU is a rate over the samples' span, which is longer than the
	// window by up to a period each side (more where a sample failed),
	// given back as seconds over the window.
	var process, etcd float64
	if span := end.at.Sub(start.at); span > 0 {
		scale := length.Seconds() / span.Seconds()
		process, etcd = (end.process-start.process)*scale, (end.etcd-start.etcd)*scale
	}
	return windowTotals{
		writes:  int(end.writes - start.writes),
		floor:   int(end.floor - start.floor),
		process: process,
		etcd:    etcd,
		length:  length,
		delays:  end.delays.since(start.delays),
	}
}

// measuredNamespace is the namespace of the test case's op that collects
// metrics, a createPods with collectMetrics or the first namespace of a
// startCollectingMetrics: its pods are the measured ones. "" when none
// names one.
func measuredNamespace(testCase map[string]any) string {
	ops, _ := testCase["workloadTemplate"].([]any)
	for _, op := range ops {
		m, _ := op.(map[string]any)
		if collect, _ := m["collectMetrics"].(bool); collect {
			ns, _ := m["namespace"].(string)
			return ns
		}
		if m["opcode"] == "startCollectingMetrics" {
			namespaces, _ := m["namespaces"].([]any)
			if len(namespaces) > 0 {
				ns, _ := namespaces[0].(string)
				return ns
			}
		}
	}
	return ""
}
