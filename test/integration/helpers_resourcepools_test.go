package integration

import (
	"context"
	"os"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/internal/monitoring"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/drascope/drascope/pkg/generated/clientset/versioned/typed/drascope/v1alpha1"
)

func resourcePools(t *testing.T) typedv1alpha1.ResourcePoolInterface {
	t.Helper()
	client, err := versioned.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return client.DrascopeV1alpha1().ResourcePools()
}

// poolObjectName is the object name drascope gives a pool of this test driver.
func poolObjectName(t *testing.T, pool string) string {
	t.Helper()
	name, ok := v1alpha1.PlainName(driverName, pool)
	if !ok {
		t.Fatalf("pool %s has no plain object name", pool)
	}
	return name
}

// waitForResourcePool waits until the named ResourcePool satisfies ok; want
// describes the wait for the failure message.
func (s *scenario) waitForResourcePool(name, want string, ok func(*v1alpha1.ResourcePool) bool) *v1alpha1.ResourcePool {
	s.t.Helper()
	client := resourcePools(s.t)
	var last *v1alpha1.ResourcePool
	var lastErr error
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		rp, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = rp
		return ok(last), nil
	})
	if err != nil {
		s.t.Fatalf("ResourcePool %s: waiting for %s: last seen %+v (%v); scheduler log: %s", name, want, last, lastErr, env.schedulerLog)
	}
	return last
}

func (s *scenario) waitForResourcePoolGone(name string) {
	s.t.Helper()
	client := resourcePools(s.t)
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		s.t.Fatalf("ResourcePool %s was not deleted", name)
	}
}

func summaryIs(total, allocated, available, unavailable int32) func(*v1alpha1.ResourcePool) bool {
	return func(rp *v1alpha1.ResourcePool) bool {
		sum := rp.Status.Summary
		return sum != nil && sum.TotalDevices == total && sum.AllocatedDevices == allocated &&
			sum.AvailableDevices == available && sum.UnavailableDevices == unavailable
	}
}

func conditionIs(typ string, status metav1.ConditionStatus) func(*v1alpha1.ResourcePool) bool {
	return func(rp *v1alpha1.ResourcePool) bool {
		c := meta.FindStatusCondition(rp.Status.Conditions, typ)
		return c != nil && c.Status == status
	}
}

// allocateDirectly writes a claim's allocation as a second scheduler process
// would, without this scheduler's knowledge.
func (s *scenario) allocateDirectly(claimName, pool, device string) {
	s.t.Helper()
	s.allocate(claimName, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: driverName, Pool: pool, Device: device})
}

// scrapeHistogramQuantiles returns the upper bounds of the buckets holding
// the 50th and 99th percentiles of a histogram on /metrics.
func scrapeHistogramQuantiles(t *testing.T, name string) (p50, p99 time.Duration, count uint64) {
	t.Helper()
	family, ok := scrapeMetrics(t)[name]
	if !ok || len(family.GetMetric()) == 0 {
		t.Fatalf("/metrics has no %s", name)
	}
	h := family.GetMetric()[0].GetHistogram()
	count = h.GetSampleCount()
	bound := func(q float64) time.Duration {
		for _, b := range h.GetBucket() {
			if float64(b.GetCumulativeCount()) >= q*float64(count) {
				return time.Duration(b.GetUpperBound() * float64(time.Second))
			}
		}
		return -1
	}
	return bound(0.5), bound(0.99), count
}

// scrapeGauge reads one gauge or counter sample from the in-process scheduler's /metrics; -1
// if absent.
func scrapeGauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return scrapeGaugeAt(t, env.schedulerPort, name, labels)
}

// scrapeGaugeAt is scrapeGauge for the scheduler serving on port.
func scrapeGaugeAt(t *testing.T, port int, name string, labels map[string]string) float64 {
	t.Helper()
	family, ok := scrapeMetricsAt(t, port)[name]
	if !ok {
		return -1
	}
next:
	for _, m := range family.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}

// waitForGauge waits until the gauge (or counter) with these labels of the
// scheduler serving on port has the value.
func waitForGauge(t *testing.T, port int, name string, labels map[string]string, want float64) {
	t.Helper()
	var got float64
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		got = scrapeGaugeAt(t, port, name, labels)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("%s%v on port %d = %v, want %v", name, labels, port, got, want)
	}
}

// scrapeMetrics reads the in-process scheduler's /metrics as an admin (the
// endpoint is behind delegated authorization).
func scrapeMetrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeMetricsAt(t, env.schedulerPort)
}

func scrapeMetricsAt(t *testing.T, port int) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := monitoring.Scrape(context.Background(), port, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// restartScheduler stops the in-process scheduler, runs between (with no
// scheduler running), and starts it again; the restart also happens if the
// test fails midway, so that later tests have a scheduler.
func restartScheduler(t *testing.T, between func()) {
	t.Helper()
	env.stopScheduler()
	env.stopScheduler = nil
	start := func() {
		stop, err := startInProcessScheduler(context.Background())
		if err != nil {
			t.Fatalf("restarting the scheduler: %v", err)
		}
		env.stopScheduler = stop
	}
	t.Cleanup(func() {
		if env.stopScheduler == nil {
			start()
		}
	})
	between()
	start()
}

const crdMissingWarning = "the ResourcePool CRD (resourcepools.drascope.dev) is not installed"

func schedulerLogLength(t *testing.T) int64 {
	t.Helper()
	klog.Flush()
	info, err := os.Stat(env.schedulerLog)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func schedulerLogSince(t *testing.T, offset int64) string {
	t.Helper()
	klog.Flush()
	data, err := os.ReadFile(env.schedulerLog)
	if err != nil {
		t.Fatal(err)
	}
	return string(data[min(offset, int64(len(data))):])
}
