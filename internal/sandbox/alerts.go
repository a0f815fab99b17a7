package sandbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/internal/monitoring"
	"github.com/drascope/drascope/manifests"
)

// fabricJobs is one more than the fabric pool's devices.
const fabricJobs = 5

// alerts uses up the fabric pool with one job too many, then runs the
// shipped alert rules over what drascope-scheduler's /metrics shows, as
// Prometheus would after monitoring.EvalMinutes of it: the waiting job's class is
// exhausted and step 4's GPU is Unhealthy, and nothing else fires: the GPU
// class has free devices although a trainer waits (it is pinned to a node),
// and every pool is Valid and Complete.
func (d *demo) alerts(ctx context.Context) error {
	const file = "fabric-exhausted/fabric-job.yaml"
	var jobs []string
	for i := 1; i <= fabricJobs; i++ {
		jobs = append(jobs, fmt.Sprintf("fabric-job-%d", i))
	}
	if err := d.createPods(ctx, file, "", jobs...); err != nil {
		return err
	}
	d.say("$ kubectl apply -n training -f manifests/examples/demo/%s   # %d times, as fabric-job-1 ... fabric-job-%d: the fabric pool has %d devices", file, fabricJobs, fabricJobs, fabricJobs-1)
	running, err := d.waitRunning(ctx, "training", "app=fabric-job", fabricJobs-1)
	if err != nil {
		return err
	}
	waiting := ""
	for i := 1; i <= fabricJobs; i++ {
		name := fmt.Sprintf("fabric-job-%d", i)
		if !slices.ContainsFunc(running, func(p v1.Pod) bool { return p.Name == name }) {
			waiting = name
		}
	}
	message, err := d.waitPending(ctx, "training", waiting, "cannot allocate all claims")
	if err != nil {
		return err
	}
	d.say("%s waits: %s", waiting, message)

	rules, err := manifests.Files.ReadFile("monitoring/rules.yaml")
	if err != nil {
		return err
	}
	evaluator, err := localcluster.BinPath(d.binDir, "drascope-alerts")
	if err != nil {
		return fmt.Errorf("%w (make sandbox builds it; by hand: make bin/drascope-alerts)", err)
	}
	unhealthy := d.nodes[1]
	want := []monitoring.Alert{
		{Name: "DRADeviceClassExhausted", Labels: map[string]string{"severity": "warning", "device_class": fabricClass}},
		{Name: "DRADeviceUnhealthy", Labels: map[string]string{"severity": "warning", "driver": gpuDriver, "pool": unhealthy, "node": unhealthy}},
	}
	var series []monitoring.Series
	var scrapeErr error
	// The pending-pod and availability gauges follow the scheduler's
	// informers: wait until they show the waiting job.
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		families, err := monitoring.Scrape(ctx, d.schedulerPort, d.adminToken)
		if scrapeErr = err; err != nil {
			return false, nil
		}
		series = monitoring.DrascopeGauges(families, func(map[string]string) bool { return true })
		return gauge(series, "drascope_pending_pods", "device_class", fabricClass) == 1 &&
			gauge(series, "drascope_device_class_available_devices", "device_class", fabricClass) == 0, nil
	}); err != nil {
		return fmt.Errorf("drascope-scheduler's /metrics does not show %s waiting for a fabric device (last scrape error: %v)", waiting, scrapeErr)
	}
	d.say("$ curl -k -H \"Authorization: Bearer $TOKEN\" https://127.0.0.1:%d/metrics   # drascope-scheduler's; %d drascope series", d.schedulerPort, len(series))
	d.say("$ drascope-alerts --rules manifests/monitoring/rules.yaml --series series.json --at %dm   # promtool test rules' evaluation, over those series held", monitoring.EvalMinutes)
	if err := monitoring.CheckAlerts(ctx, evaluator, rules, series, want); err != nil {
		return err
	}
	d.say("firing: %s: %g pod waits for %s, and no fabric device is free", want[0], gauge(series, "drascope_pending_pods", "device_class", fabricClass), fabricClass)
	d.say("firing: %s: step 4's GPU", want[1])
	d.say("quiet:  DRADeviceClassExhausted for %s: %g pod waits (pinned to %s), but %g GPUs are free elsewhere",
		gpuClass, gauge(series, "drascope_pending_pods", "device_class", gpuClass), unhealthy, gauge(series, "drascope_device_class_available_devices", "device_class", gpuClass))
	d.say("quiet:  DRAResourcePoolNotValid, DRAResourcePoolIncomplete, DRAAllocationConflict: every pool is Valid and Complete, with no conflict")
	return nil
}

// gauge is the value of the first series of name whose label is value; -1
// when there is none.
func gauge(series []monitoring.Series, name, label, value string) float64 {
	for _, s := range series {
		if s.Name == name && s.Labels[label] == value {
			return s.Value
		}
	}
	return -1
}
