package perf

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"

	dsmetrics "github.com/drascope/drascope/pkg/metrics"
)

// writeWindow counts the ResourcePool writes made inside a run's measured
// window: from the first measured pod's creation to the last measured pod's
// binding, as the harness's informer sees them. scheduler_perf's collectors
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
}

const samplePeriod = 100 * time.Millisecond

// watchWriteWindow samples the writes counter and watches the pods of
// namespace until ctx ends.
func watchWriteWindow(ctx context.Context, client kubernetes.Interface, namespace string) *writeWindow {
	w := &writeWindow{bound: map[types.UID]bool{}}
	go func() {
		ticker := time.NewTicker(samplePeriod)
		defer ticker.Stop()
		for {
			writes, err := writesSoFar()
			if err != nil {
				klog.FromContext(ctx).Error(err, "Sampling ResourcePool writes")
			} else {
				w.mu.Lock()
				w.samples = append(w.samples, counterSample{at: time.Now(), writes: writes})
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

// writes returns the writes made inside the window and the window's length;
// 0, 0 when no measured pod was bound.
func (w *writeWindow) writes() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() || w.last.IsZero() {
		return 0, 0
	}
	// The last sample at or before the start, and the first at or after the
	// end: the count errs by at most one period's writes on each side,
	// towards more.
	var start, end float64
	startSet, endSet := false, false
	for _, s := range w.samples {
		if !s.at.After(w.first) {
			start, startSet = s.writes, true
		}
		if !endSet && !s.at.Before(w.last) {
			end, endSet = s.writes, true
		}
	}
	if !endSet && len(w.samples) > 0 {
		end = w.samples[len(w.samples)-1].writes
	}
	if !startSet && len(w.samples) > 0 {
		// The window began before the first sample: count from it.
		start = w.samples[0].writes
	}
	return int(end - start), w.last.Sub(w.first)
}

// measuredNamespace is the namespace of the test case's op that collects
// metrics: its pods are the measured ones. "" when none names one.
func measuredNamespace(testCase map[string]any) string {
	ops, _ := testCase["workloadTemplate"].([]any)
	for _, op := range ops {
		m, _ := op.(map[string]any)
		if collect, _ := m["collectMetrics"].(bool); collect {
			ns, _ := m["namespace"].(string)
			return ns
		}
	}
	return ""
}
