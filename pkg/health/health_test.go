package health

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const hold = 10 * time.Minute

var (
	gpu0 = Device{Driver: "gpu.example.com", Pool: "node-1", Name: "gpu-0"}
	gpu1 = Device{Driver: "gpu.example.com", Pool: "node-1", Name: "gpu-1"}
)

// world is what the cache looks up: the claims of the informer cache,
// and what it was told.
type world struct {
	claims  map[string]*resourceapi.ResourceClaim
	changed [][]Device
	ignored map[string]int
}

func (w *world) claim(namespace, name string) (*resourceapi.ResourceClaim, error) {
	if claim, ok := w.claims[namespace+"/"+name]; ok {
		return claim, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
}

// reporting is a pod on node-1 whose container reports health for its
// claim "gpu" (ResourceClaim claim-<name>) as kubelet writes it.
func reporting(name string, resources ...v1.ResourceHealth) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			NodeName:       "node-1",
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-" + name)}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning,
			ContainerStatuses: []v1.ContainerStatus{{
				Name:                     "ctr",
				AllocatedResourcesStatus: []v1.ResourceStatus{{Name: "claim:gpu/req", Resources: resources}},
			}},
		},
	}
}

// running is reporting, with claim-<name> allocated the devices and
// reserved for the pod: the pod holds them.
func (w *world) running(name string, holds []Device, resources ...v1.ResourceHealth) *v1.Pod {
	pod := reporting(name, resources...)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "claim-" + name},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}},
		},
	}
	for _, d := range holds {
		claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: d.Driver, Pool: d.Pool, Device: d.Name})
	}
	w.claims["default/"+claim.Name] = claim
	return pod
}

// failed is the pod's final status as kubelet writes it, in one update:
// Failed, with the given health; the resourceclaim controller then
// releases its claim.
func (w *world) failed(pod *v1.Pod, resources ...v1.ResourceHealth) *v1.Pod {
	failed := pod.DeepCopy()
	failed.Status.Phase = v1.PodFailed
	failed.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources = resources
	delete(w.claims, "default/claim-"+pod.Name)
	return failed
}

// failedJob runs a pod holding gpu-0 that then fails reporting it
// Unhealthy ("Xid 79"), and returns its final status.
func (w *world) failedJob(logger klog.Logger, c *Cache) *v1.Pod {
	job := w.running("job", []Device{gpu0})
	c.ObservePod(logger, job)
	final := w.failed(job, unhealthy(gpu0, "Xid 79"))
	c.ObservePod(logger, final)
	return final
}

func health(id string, h v1.ResourceHealthStatus, message string) v1.ResourceHealth {
	r := v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: h}
	if message != "" {
		r.Message = &message
	}
	return r
}

func unhealthy(d Device, message string) v1.ResourceHealth {
	return health(d.String(), v1.ResourceHealthStatusUnhealthy, message)
}

func healthy(d Device) v1.ResourceHealth {
	return health(d.String(), v1.ResourceHealthStatusHealthy, "")
}

func newTestCache(t *testing.T) (*Cache, *testingclock.FakeClock, *world) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC))
	w := &world{claims: map[string]*resourceapi.ResourceClaim{}, ignored: map[string]int{}}
	c := New(Options{
		HoldTime:  hold,
		Clock:     clk,
		Resolver:  Resolver{Claim: w.claim},
		OnChange:  func(d []Device) { w.changed = append(w.changed, d) },
		OnIgnored: func(reason string) { w.ignored[reason]++ },
	})
	return c, clk, w
}

func unhealthyIDs(c *Cache) sets.Set[structured.DeviceID] {
	set := sets.New[structured.DeviceID]()
	c.InsertUnhealthy(set)
	return set
}

func healthOf(c *Cache, d Device) v1.ResourceHealthStatus {
	r, _ := c.Get(d)
	return r.Health
}

// A running pod reporting its device Unhealthy keeps it Unhealthy for as
// long as it runs, however quiet: kubelet writes status only on change.
// Once the pod is deleted the hold time starts, and at its end the device
// is Unknown.
func TestUnhealthyWhileReportedThenHeld(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	trainer := w.running("trainer", []Device{gpu0, gpu1}, unhealthy(gpu0, "ECC error"), healthy(gpu1))
	c.ObservePod(logger, trainer)
	r, ok := c.Get(gpu0)
	if !ok || r.Health != v1.ResourceHealthStatusUnhealthy || r.Pod != "default/trainer" || r.PodUID != trainer.UID || r.Node != "node-1" || r.Message != "ECC error" {
		t.Fatalf("gpu-0: %+v %v, want Unhealthy from default/trainer on node-1 with its message", r, ok)
	}
	// Cluster-scoped readers learn the node, never the tenant's pod; the
	// pod's own namespace learns the pod.
	if want := "reported by kubelet on node node-1 at 2026-11-22T09:00:00Z: ECC error"; r.Detail() != want {
		t.Errorf("detail %q, want %q", r.Detail(), want)
	}
	if want := "reported by pod default/trainer at 2026-11-22T09:00:00Z: ECC error"; r.DetailFor("default") != want {
		t.Errorf("detail for default %q, want %q", r.DetailFor("default"), want)
	}
	if got := r.DetailFor("team-b"); got != r.Detail() {
		t.Errorf("detail for team-b %q names more than the cluster-scoped detail %q", got, r.Detail())
	}
	if got := unhealthyIDs(c); !got.Equal(sets.New(structured.MakeDeviceID("gpu.example.com", "node-1", "gpu-0"))) {
		t.Errorf("unhealthy set %v, want only gpu-0", got)
	}

	clk.Step(3 * hold)
	if next := c.expire(logger); !next.IsZero() {
		t.Errorf("an expiry is due at %v while the pod still reports the device", next)
	}
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 three hold times later, still reported: %s, want Unhealthy", got)
	}

	c.podLeft(logger, trainer.UID, false)
	deleted := clk.Now()
	r, _ = c.Get(gpu0)
	if r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(deleted.Add(hold)) || !strings.Contains(r.Detail(), "held until") {
		t.Fatalf("gpu-0 after its pod was deleted: %+v %q, want Unhealthy, held until a hold time from now", r, r.Detail())
	}
	clk.Step(hold - time.Second)
	if next := c.expire(logger); !next.Equal(deleted.Add(hold)) {
		t.Errorf("next expiry %v, want %v", next, deleted.Add(hold))
	}
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 a second before the hold time ends: %s", got)
	}
	w.changed = nil
	clk.Step(time.Second)
	// Reads see Unknown at once, even before expire runs.
	if got := unhealthyIDs(c); got.Len() != 0 {
		t.Errorf("unhealthy set at the end of the hold time: %v", got)
	}
	if next := c.expire(logger); !next.IsZero() {
		t.Errorf("next expiry %v, want none", next)
	}
	r, _ = c.Get(gpu0)
	if r.Health != v1.ResourceHealthStatusUnknown || !r.Expired || !strings.Contains(r.Detail(), "hold time ended") {
		t.Errorf("gpu-0 after the hold time: %+v %q, want Unknown, expired", r, r.Detail())
	}
	if len(w.changed) != 1 || w.changed[0][0] != gpu0 {
		t.Errorf("changes %v, want gpu-0 told once", w.changed)
	}
}

// A report that changes from Unhealthy starts the hold time as a deleted
// pod does; Unknown from another pod changes nothing.
func TestHoldStartsWhenTheReportChanges(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	trainer := w.running("trainer", []Device{gpu0}, unhealthy(gpu0, ""))
	c.ObservePod(logger, trainer)
	probe := w.running("probe", []Device{gpu0}, health(gpu0.String(), v1.ResourceHealthStatusUnknown, ""))
	c.ObservePod(logger, probe)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.IsZero() {
		t.Fatalf("gpu-0 after an Unknown report from another pod: %+v, want Unhealthy, not held", r)
	}
	clk.Step(time.Minute)
	quiet := trainer.DeepCopy()
	quiet.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources[0].Health = v1.ResourceHealthStatusUnknown
	c.ObservePod(logger, quiet)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(clk.Now().Add(hold)) {
		t.Errorf("gpu-0 after its reporter says Unknown: %+v, want Unhealthy, held for a hold time from now", r)
	}
}

// A new Healthy report from a holder ends Unhealthy at once, even while
// the failed pod that reported it is kept; the failed pod's unchanged
// status does not bring it back, and its deletion starts no hold.
func TestHealthyReportEndsItAtOnce(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	final := w.failedJob(logger, c)
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 after the job failed reporting it: %s, want Unhealthy", got)
	}

	monitor := w.running("monitor", []Device{gpu0, gpu1}, healthy(gpu0))
	c.ObservePod(logger, monitor)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusHealthy || r.Pod != "default/monitor" {
		t.Fatalf("gpu-0 after the monitor reports it Healthy: %+v, want Healthy from default/monitor", r)
	}
	c.ObservePod(logger, final) // a resync of the unchanged failed pod
	c.ObservePod(logger, monitor)
	c.podDeleted(logger, final.UID)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusHealthy || !r.HeldUntil.IsZero() {
		t.Errorf("gpu-0 after resyncs and the failed pod's deletion: %+v, want Healthy", r)
	}
}

// One holder cannot clear what another reports: while a running pod's
// status says its device is Unhealthy, a Healthy report from another
// running holder (a pod sharing the claim, an admin-access monitor) leaves
// it Unhealthy; the reporter's own Healthy report ends it.
func TestAHolderCannotClearAnotherHoldersReport(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	trainer := w.running("trainer", []Device{gpu0}, unhealthy(gpu0, "Xid 79"))
	c.ObservePod(logger, trainer)
	other := w.running("other", []Device{gpu0}, healthy(gpu0))
	c.ObservePod(logger, other)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || r.Pod != "default/trainer" || r.Message != "Xid 79" {
		t.Fatalf("gpu-0 after another running holder reports it Healthy: %+v, want Unhealthy as the trainer reports it", r)
	}
	if !unhealthyIDs(c).Has(structured.MakeDeviceID(gpu0.Driver, gpu0.Pool, gpu0.Name)) {
		t.Error("gpu-0 is handed out again although its reporter still reports it Unhealthy")
	}
	recovered := w.running("trainer", []Device{gpu0}, healthy(gpu0))
	recovered.UID = trainer.UID
	c.ObservePod(logger, recovered)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusHealthy {
		t.Errorf("gpu-0 after its reporter reports it Healthy: %+v, want Healthy", r)
	}
}

// The batch job case: kubelet writes phase Failed and Unhealthy in one
// status update, the scheduler's informer drops the pod (a delete with the
// previous status), and the resourceclaim controller releases the claim.
// The report still counts, whichever informer speaks first, because the
// pod's holding was remembered while it ran.
func TestFailedPodReportCountsAfterItsClaimIsReleased(t *testing.T) {
	for name, terminalFirst := range map[string]bool{"terminal informer first": true, "scheduler's informer first": false} {
		t.Run(name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			c, _, w := newTestCache(t)
			job := w.running("job", []Device{gpu0})
			c.ObservePod(logger, job)
			final := w.failed(job, unhealthy(gpu0, "Xid 79"))
			if terminalFirst {
				c.ObservePod(logger, final)
				c.podLeft(logger, job.UID, true)
			} else {
				c.podLeft(logger, job.UID, false)
				c.ObservePod(logger, final)
			}
			finished := c.opts.Clock.Now()
			if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(finished.Add(hold)) || r.Message != "Xid 79" {
				t.Fatalf("gpu-0: %+v, want Unhealthy, held for a hold time from the pod's finish", r)
			}
			c.podDeleted(logger, final.UID)
			if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(finished.Add(hold)) {
				t.Errorf("gpu-0 after the failed pod was deleted: %+v, want Unhealthy, its hold unchanged", r)
			}
			if _, _, holdings := c.Len(); holdings != 0 {
				t.Errorf("%d holdings remembered after the pod was deleted, want 0", holdings)
			}
		})
	}
}

// Only a holder is believed: a pod reporting a device none of its claims
// reserved for it has allocated is ignored, counted and logged once.
func TestReportsFromNonHoldersAreIgnored(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	c, _, w := newTestCache(t)
	liar := w.running("liar", []Device{gpu1}, unhealthy(gpu0, "fake"), unhealthy(gpu1, "real"))
	for range 2 {
		c.ObservePod(logger, liar)
	}
	// A claim not reserved for the pod holds nothing for it either.
	borrower := w.running("borrower", []Device{gpu0}, unhealthy(gpu0, "borrowed"))
	w.claims["default/claim-borrower"].Status.ReservedFor[0].UID = "someone-else"
	c.ObservePod(logger, borrower)
	// A finished pod the scheduler never saw run holds nothing it can show.
	stranger := w.failed(w.running("stranger", []Device{gpu0}), unhealthy(gpu0, "stale"))
	c.ObservePod(logger, stranger)

	if got := c.Unhealthy(); len(got) != 1 || got[0].Device != gpu1 {
		t.Errorf("Unhealthy %v, want only gpu-1, which the liar holds", got)
	}
	if got := w.ignored[IgnoredNotHolder]; got != 4 {
		t.Errorf("%d reports counted as %s, want 4", got, IgnoredNotHolder)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, pod := range []string{"default/liar", "default/borrower", "default/stranger"} {
		n := 0
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "Ignoring device health reports about devices the pod does not hold") && strings.Contains(line, `pod="`+pod+`"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pod %s logged %d times at the default level, want once; logs:\n%s", pod, n, logs)
		}
	}
}

func TestRunTellsWhenTheHoldTimeEnds(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	told := make(chan []Device, 10)
	c.opts.OnChange = func(d []Device) { told <- d }
	trainer := w.running("trainer", []Device{gpu0}, unhealthy(gpu0, ""))
	c.ObservePod(logger, trainer)
	c.podLeft(logger, trainer.UID, false)
	<-told // the report
	<-told // the hold time started
	go c.Run(ctx)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(hold)
	select {
	case d := <-told:
		if len(d) != 1 || d[0] != gpu0 {
			t.Errorf("expired %v, want gpu-0", d)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not expire gpu-0 at the end of its hold time")
	}
}

// Under deviceHealth.policy Taint the rule is the persisted report: a
// restarted scheduler restores it, believes the pod whose UID it holds
// (whose claim is long released) and starts the hold time when that pod is
// gone. The rule is cluster-scoped: it holds the reporter's UID, not its
// name, so the restored report names no pod.
func TestRestoreFromRules(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	_, clk, _ := newTestCache(t)
	reportedAt := clk.Now().Add(-time.Hour)
	report := Report{Device: gpu0, Health: v1.ResourceHealthStatusUnhealthy, Pod: "default/job", PodUID: "uid-job", Node: "node-1", Message: "Xid 79", Since: reportedAt}
	rule := RuleFor(report)
	if !isOwnRule(rule) || rule.Spec.Taint.Effect != resourceapi.DeviceTaintEffectNoSchedule || *rule.Spec.DeviceSelector.Device != "gpu-0" {
		t.Fatalf("RuleFor: %+v", rule)
	}
	for key, value := range rule.Annotations {
		if key != AnnotationReporter && (strings.Contains(value, "default") || strings.Contains(value, "job")) {
			t.Errorf("the rule's annotation %s=%q names the reporting pod or its namespace", key, value)
		}
	}
	report.Pod = "" // what a restarted scheduler can know from the rule

	t.Run("the named pod still runs and reports it", func(t *testing.T) {
		c, _, w := newTestCache(t)
		c.Restore(logger, rule)
		if r, _ := c.Get(gpu0); r != report {
			t.Fatalf("restored %+v, want %+v", r, report)
		}
		job := w.running("job", []Device{gpu0}, unhealthy(gpu0, "Xid 79"))
		delete(w.claims, "default/claim-job") // released long ago
		c.ObservePod(logger, job)
		c.Settle(logger)
		if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.IsZero() || !r.Since.Equal(reportedAt) {
			t.Fatalf("after the pod was seen: %+v, want Unhealthy since the rule's time, not held", r)
		}
		// Seen again (a relist): still believed, though its claim is gone.
		c.ObservePod(logger, job.DeepCopy())
		if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.IsZero() {
			t.Fatalf("after the pod was seen again: %+v, want Unhealthy, not held", r)
		}
		c.podLeft(logger, job.UID, false)
		if r, _ := c.Get(gpu0); r.HeldUntil.IsZero() {
			t.Errorf("after the pod was deleted: %+v, want the hold time started", r)
		}
	})
	t.Run("the named pod finished long ago", func(t *testing.T) {
		// A restart does not start a finished pod's hold again: it ended a
		// hold time after the pod's own finish.
		c, _, w := newTestCache(t)
		c.Restore(logger, rule)
		job := w.failed(w.running("job", []Device{gpu0}), unhealthy(gpu0, "Xid 79"))
		job.Status.ContainerStatuses[0].State.Terminated = &v1.ContainerStateTerminated{FinishedAt: metav1.NewTime(reportedAt)}
		c.ObservePod(logger, job)
		c.Settle(logger)
		if got := healthOf(c, gpu0); got == v1.ResourceHealthStatusUnhealthy {
			t.Errorf("an hour after its reporter finished (hold %s): %s, want the hold ended", hold, got)
		}
	})
	t.Run("the named pod reports something else now", func(t *testing.T) {
		c, clk, w := newTestCache(t)
		c.Restore(logger, rule)
		c.ObservePod(logger, w.failed(w.running("job", []Device{gpu0})))
		if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(clk.Now().Add(hold)) {
			t.Errorf("the named pod reports nothing about gpu-0: %+v, want held for a hold time from now", r)
		}
	})
	t.Run("the named pod is gone", func(t *testing.T) {
		c, clk, _ := newTestCache(t)
		c.Restore(logger, rule)
		c.Settle(logger)
		if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(clk.Now().Add(hold)) {
			t.Errorf("settled with no pod: %+v, want held for a hold time from now", r)
		}
	})
	t.Run("held already", func(t *testing.T) {
		c, clk, _ := newTestCache(t)
		held := report
		held.HeldUntil = clk.Now().Add(time.Minute)
		c.Restore(logger, RuleFor(held))
		c.Settle(logger)
		if r, _ := c.Get(gpu0); r != held {
			t.Fatalf("restored %+v, want %+v", r, held)
		}
		clk.Step(time.Minute)
		if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnknown {
			t.Errorf("at the rule's held-until time: %s, want Unknown", got)
		}
	})
	t.Run("not drascope's", func(t *testing.T) {
		c, _, _ := newTestCache(t)
		foreign := rule.DeepCopy()
		foreign.Labels = nil
		c.Restore(logger, foreign)
		if _, ok := c.Get(gpu0); ok {
			t.Errorf("a rule without drascope's label was restored")
		}
	})
}

func TestRuleNamesAreValidAndDistinct(t *testing.T) {
	long := Device{Driver: "gpu.example.com", Pool: "rack-1/" + strings.Repeat("n", 200), Name: strings.Repeat("d", 63)}
	names := sets.New[string]()
	for _, d := range []Device{gpu0, gpu1, long, {Driver: "gpu.example.com", Pool: "node-2", Name: "gpu-0"}} {
		name := RuleName(d)
		if len(name) > 253 || strings.ContainsAny(name, "/_") || strings.HasSuffix(name, "-") {
			t.Errorf("RuleName(%s) = %q, not a DNS subdomain", d, name)
		}
		names.Insert(name)
	}
	if names.Len() != 4 {
		t.Errorf("names %v are not distinct", sets.List(names))
	}
}

// State is bounded: devices that left every slice and are not Unhealthy
// are forgotten after two sweeps (a node rebooted to fix a GPU drops its
// slices for a while, and the GPU must come back withheld), and so is what
// was remembered of pods deleted while running, after the grace period.
func TestSweepForgets(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	exists := sets.New(gpu0, gpu1)
	c.opts.DeviceExists = func(d Device) bool { return exists.Has(d) }
	a := w.running("a", []Device{gpu0}, healthy(gpu0))
	b := w.running("b", []Device{gpu1}, unhealthy(gpu1, ""))
	c.ObservePod(logger, a)
	c.ObservePod(logger, b)
	c.podLeft(logger, a.UID, false)
	c.podLeft(logger, b.UID, false)
	exists.Delete(gpu0, gpu1)
	c.sweep(logger)
	if devices, _, _ := c.Len(); devices != 2 {
		t.Fatalf("%d devices after one sweep, want 2", devices)
	}
	clk.Step(holdingGrace)
	c.sweep(logger)
	if _, ok := c.Get(gpu0); ok {
		t.Errorf("gpu-0, Healthy and in no slice for two sweeps, is remembered")
	}
	if got := healthOf(c, gpu1); got != v1.ResourceHealthStatusUnknown {
		t.Errorf("gpu-1, held Unhealthy until a hold time ended: %s, want Unknown (expired, not forgotten early)", got)
	}
	if devices, pods, holdings := c.Len(); devices != 1 || pods != 0 || holdings != 0 {
		t.Errorf("remembered %d devices, %d pods, %d holdings after the grace period; want 1, 0, 0", devices, pods, holdings)
	}
	c.sweep(logger)
	if devices, _, _ := c.Len(); devices != 0 {
		t.Errorf("%d devices once gpu-1's hold ended and it is in no slice, want 0", devices)
	}
}

// A finished pod that is kept is still believed after its claims were
// released, however often its informer relists it, but its word lasts a
// hold time from its finish, not as long as the object: whoever may write
// that pod's status (a custom role with pods/status, a compromised
// kubelet) cannot keep a device out of service for good, not even by
// rewriting the report or the finish time.
func TestKeptFailedPodsReportEndsAHoldTimeAfterItFinished(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	job := w.running("job", []Device{gpu0, gpu1})
	c.ObservePod(logger, job)
	final := w.failed(job, unhealthy(gpu0, "Xid 79"))
	// kubelet's own finish time, a minute before the scheduler saw it.
	finished := clk.Now().Add(-time.Minute)
	final.Status.ContainerStatuses[0].State.Terminated = &v1.ContainerStateTerminated{FinishedAt: metav1.NewTime(finished)}
	c.ObservePod(logger, final)
	c.podLeft(logger, final.UID, true)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(finished.Add(hold)) {
		t.Fatalf("gpu-0 reported by the failed pod: %+v, want Unhealthy, held until a hold time after its finish", r)
	}
	clk.Step(3 * holdingGrace)
	c.sweep(logger)
	relisted := final.DeepCopy()
	relisted.Labels = map[string]string{"seen": "again"}
	c.ObservePod(logger, relisted)
	if got := healthOf(c, gpu0); got == v1.ResourceHealthStatusUnhealthy {
		t.Errorf("gpu-0 three grace periods after the pod finished: %s, want its hold ended", got)
	}
	if got := w.ignored[IgnoredNotHolder]; got != 0 {
		t.Errorf("%d reports of the kept failed pod counted as %s", got, IgnoredNotHolder)
	}

	// The status writer forges a new report and a finish time to come.
	forged := final.DeepCopy()
	forged.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources = []v1.ResourceHealth{unhealthy(gpu0, "forged"), unhealthy(gpu1, "forged")}
	forged.Status.ContainerStatuses[0].State.Terminated.FinishedAt = metav1.NewTime(clk.Now().Add(24 * time.Hour))
	c.ObservePod(logger, forged)
	for _, d := range []Device{gpu0, gpu1} {
		if got := healthOf(c, d); got == v1.ResourceHealthStatusUnhealthy {
			t.Errorf("%s after the finished pod's status was rewritten: %s, want the hold from its first finish, ended", d, got)
		}
	}
}

// The two pod informers are separate streams: an update of the scheduler's
// informer that arrives after the final status is older, and ignored.
func TestOldRunningStatusAfterTheFinalOneIsIgnored(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	job := w.running("job", []Device{gpu0}, healthy(gpu0))
	c.ObservePod(logger, w.running("job", []Device{gpu0}))
	c.ObservePod(logger, w.failed(job, unhealthy(gpu0, "Xid 79")))
	c.ObservePod(logger, job) // the container-start update, delivered late
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("gpu-0 after a late running update: %s, want Unhealthy from the final status", got)
	}
}

// A report that turns Unknown after the hold time ended, before Run
// expired the device, must not leave it withheld.
func TestUnknownAfterTheHoldTimeIsNotWithheld(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	a := w.running("a", []Device{gpu0}, unhealthy(gpu0, ""))
	c.ObservePod(logger, a)
	c.podLeft(logger, a.UID, false)
	clk.Step(hold)
	c.ObservePod(logger, w.running("probe", []Device{gpu0}, health(gpu0.String(), v1.ResourceHealthStatusUnknown, "")))
	if got := unhealthyIDs(c); got.Len() != 0 {
		t.Errorf("withheld %v after the hold time and an Unknown report", got)
	}
}

// kubelet reports a device by its first CDI ID when the driver gives one;
// once the failed pod's claim is released, what the claim held while the
// pod ran resolves it.
func TestCDIReportOfAFailedPod(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	job := w.running("job", []Device{gpu1})
	c.ObservePod(logger, job)
	c.ObservePod(logger, w.failed(job, health("gpu.example.com/gpu=gpu-1", v1.ResourceHealthStatusUnhealthy, "")))
	if got := healthOf(c, gpu1); got != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("gpu-1: %s, want Unhealthy", got)
	}
}

// A standalone claim outlives its pod: once the pod failed, the claim is
// allocated again, on another device, for a new pod. The kept failed pod's
// CDI report is about the device the claim held for it, and counts; the
// claim's current allocation, for the new pod, says nothing about it.
func TestCDIReportOfAFailedPodWhoseClaimWasReused(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	job := w.running("job", []Device{gpu0})
	c.ObservePod(logger, job)
	final := w.failed(job, health("gpu.example.com/gpu=gpu-0", v1.ResourceHealthStatusUnhealthy, "Xid 79"))
	// The same ResourceClaim, now allocated gpu-1 and reserved for another pod.
	w.claims["default/claim-job"] = &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "claim-job"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "req", Driver: gpu1.Driver, Pool: gpu1.Pool, Device: gpu1.Name},
			}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "next", UID: "uid-next"}},
		},
	}
	c.ObservePod(logger, final)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || r.Message != "Xid 79" {
		t.Errorf("gpu-0, which the failed pod held and reports: %+v, want Unhealthy", r)
	}
	if got := healthOf(c, gpu1); got == v1.ResourceHealthStatusUnhealthy {
		t.Errorf("gpu-1, the claim's new device, which the failed pod never held: %s", got)
	}
}

// At start-up pods and claims are listed concurrently: a running pod judged
// before its claim was known is looked at again when the claim arrives,
// since kubelet writes its status again only on change.
func TestClaimEventRechecksDistrustedReports(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	quiet := w.running("quiet", []Device{gpu0}, unhealthy(gpu0, "Xid 79"))
	claim := w.claims["default/claim-quiet"]
	delete(w.claims, "default/claim-quiet")
	c.ObservePod(logger, quiet)
	if got := healthOf(c, gpu0); got == v1.ResourceHealthStatusUnhealthy {
		t.Fatal("believed before the claim was known")
	}
	w.claims["default/claim-quiet"] = claim
	c.observeClaim(logger, claim)
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("gpu-0 once the claim arrived: %s, want Unhealthy", got)
	}
}

// What is persisted names a pod that still reports the device: when the
// named reporter goes, another holder is named.
func TestReporterIsRenamedWhenItGoes(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	a := w.running("a", []Device{gpu0}, unhealthy(gpu0, "first"))
	b := w.running("b", []Device{gpu0}, unhealthy(gpu0, "second"))
	c.ObservePod(logger, a)
	c.ObservePod(logger, b)
	if r, _ := c.Get(gpu0); r.PodUID != b.UID {
		t.Fatalf("reporter %s, want the latest, b", r.PodUID)
	}
	c.podLeft(logger, b.UID, false)
	if r, _ := c.Get(gpu0); r.PodUID != a.UID || r.Pod != "default/a" || r.Message != "first" || !r.HeldUntil.IsZero() {
		t.Errorf("after b left: %+v, want a named, with its message, not held", r)
	}
}

// A process that starts leading adopts what the previous leader persisted
// and it missed, for a hold time; a newer report of its own wins.
func TestAdoptOnLeading(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	reportedAt := clk.Now().Add(-time.Minute)
	missed := RuleFor(Report{Device: gpu0, Health: v1.ResourceHealthStatusUnhealthy, Pod: "default/job", PodUID: "uid-job", Since: reportedAt})
	recovered := RuleFor(Report{Device: gpu1, Health: v1.ResourceHealthStatusUnhealthy, Pod: "default/job", PodUID: "uid-job", Since: reportedAt})
	c.ObservePod(logger, w.running("monitor", []Device{gpu1}, healthy(gpu1)))
	c.Adopt(logger, missed)
	c.Adopt(logger, recovered)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || !r.HeldUntil.Equal(clk.Now().Add(hold)) {
		t.Errorf("gpu-0 adopted: %+v, want Unhealthy for a hold time from now", r)
	}
	if got := healthOf(c, gpu1); got != v1.ResourceHealthStatusHealthy {
		t.Errorf("gpu-1, reported Healthy after the rule's report: %s, want Healthy", got)
	}
}

// A labelled rule is drascope's only under the name of the device it
// selects: edited to select another device, it is the report of neither.
func TestEditedRuleIsNotOwn(t *testing.T) {
	rule := RuleFor(Report{Device: gpu0, Health: v1.ResourceHealthStatusUnhealthy, Since: time.Unix(0, 0)})
	if !isOwnRule(rule) {
		t.Fatal("RuleFor makes a rule isOwnRule refuses")
	}
	edited := rule.DeepCopy()
	edited.Spec.DeviceSelector.Device = ptr.To("gpu-1")
	if isOwnRule(edited) || !HasOwnLabel(edited) {
		t.Errorf("a rule edited to select another device: isOwnRule %v, HasOwnLabel %v; want false, true", isOwnRule(edited), HasOwnLabel(edited))
	}
	if _, ok := DeviceOfRule(edited); ok {
		t.Error("an edited rule is restored")
	}
	rekeyed := rule.DeepCopy()
	rekeyed.Spec.Taint.Key = "example.com/other"
	if isOwnRule(rekeyed) || sameRule(rekeyed, rule) {
		t.Error("a rule with another taint key counts as drascope's, or as unchanged")
	}
	annotated := rule.DeepCopy()
	annotated.Annotations["owner"] = "someone"
	annotated.Labels["team"] = "gpu"
	annotated.Spec.Taint.TimeAdded = &metav1.Time{Time: time.Unix(100, 0)}
	if !sameRule(annotated, rule) {
		t.Error("labels, annotations and timeAdded that others add make a rule look changed")
	}
}

// The terminal-pod informer keeps only what health reads, and that is
// enough: the slim pod reports what the full one does.
func TestSlimTerminalPodReportsTheSame(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	full := reporting("job", unhealthy(gpu0, "Xid 79"))
	full.Labels = map[string]string{"job-name": "train"}
	full.Spec.Containers = []v1.Container{{Name: "ctr", Image: "registry.example.com/train:v1"}}
	full.Status.Phase = v1.PodFailed
	full.Status.ContainerStatuses[0].Image = "registry.example.com/train:v1"
	obj, err := slimTerminalPod(full)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*v1.Pod)
	if slim.Labels != nil || slim.Spec.Containers != nil || slim.Status.ContainerStatuses[0].Image != "" {
		t.Errorf("slim pod keeps more than health reads: %+v", slim)
	}
	for _, pod := range []*v1.Pod{full, slim} {
		c, _, w := newTestCache(t)
		c.ObservePod(logger, w.running("job", []Device{gpu0}))
		c.ObservePod(logger, pod)
		if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || r.Message != "Xid 79" {
			t.Errorf("from the %s pod: %+v, want Unhealthy with the message", map[bool]string{true: "full", false: "slim"}[pod == full], r)
		}
	}
	noClaims, _ := slimTerminalPod(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Status: full.Status})
	if p, ok := noClaims.(*metav1.PartialObjectMetadata); !ok || p.Name != "web" || p.Namespace != "default" {
		t.Errorf("a pod without claims is kept as %#v, want its name only", noClaims)
	}
}

func TestInitAndEphemeralContainersReport(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	pod := w.running("p", []Device{gpu0, gpu1})
	pod.Status.ContainerStatuses = nil
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "init", AllocatedResourcesStatus: []v1.ResourceStatus{{
		Name: "claim:gpu", Resources: []v1.ResourceHealth{unhealthy(gpu0, "")}}}}}
	pod.Status.EphemeralContainerStatuses = []v1.ContainerStatus{{Name: "debug", AllocatedResourcesStatus: []v1.ResourceStatus{{
		Name: "claim:gpu/req", Resources: []v1.ResourceHealth{unhealthy(gpu1, "")}}}}}
	c.ObservePod(logger, pod)
	if got := len(c.Unhealthy()); got != 2 {
		t.Errorf("%d Unhealthy devices, want 2 (init and ephemeral containers)", got)
	}
}

func TestParseResourceID(t *testing.T) {
	tests := map[string]struct {
		id      string
		want    Device
		wantErr string
	}{
		"plain":                   {id: "gpu.example.com/node-1/gpu-0", want: gpu0},
		"pool with slashes":       {id: "gpu.example.com/rack-1/node-1/gpu-0", want: Device{Driver: "gpu.example.com", Pool: "rack-1/node-1", Name: "gpu-0"}},
		"two parts":               {id: "gpu.example.com/gpu-0", wantErr: "got 2 part(s)"},
		"one part":                {id: "gpu-0", wantErr: "got 1 part(s)"},
		"empty pool segment":      {id: "gpu.example.com//gpu-0", wantErr: "pool name"},
		"bad driver":              {id: "GPU_Driver/node-1/gpu-0", wantErr: "driver name"},
		"bad device":              {id: "gpu.example.com/node-1/gpu.0", wantErr: "device name"},
		"empty":                   {id: "", wantErr: "got 1 part(s)"},
		"trailing slash (no dev)": {id: "gpu.example.com/node-1/", wantErr: "device name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseResourceID(tc.id)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestBadResourceIDsAreIgnoredAndLoggedOnce(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	c, _, w := newTestCache(t)
	c.opts.Resolver.KnownDriver = func(driver string) bool { return driver == "gpu.example.com" }
	pod := w.running("p", []Device{gpu1},
		health("gpu.example.com/gpu-0", v1.ResourceHealthStatusUnhealthy, ""),
		health("nic.example.com/node-1/nic-0", v1.ResourceHealthStatusUnhealthy, ""),
		health("gpu.example.com/node-1/gpu-1", v1.ResourceHealthStatusUnhealthy, ""),
	)
	for range 3 {
		c.ObservePod(logger, pod)
	}
	if got := c.Unhealthy(); len(got) != 1 || got[0].Device != gpu1 {
		t.Errorf("Unhealthy %v, want only gpu-1", got)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []string{`resourceID="gpu.example.com/gpu-0"`, `resourceID="nic.example.com/node-1/nic-0"`} {
		n := 0
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "Ignoring a device health report") && strings.Contains(line, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s logged %d times at the default level, want once; logs:\n%s", want, n, logs)
		}
	}
	if !strings.Contains(logs, `no ResourceSlice is published by driver \"nic.example.com\"`) {
		t.Errorf("the unknown driver is not named in the logs:\n%s", logs)
	}
	if got := w.ignored[IgnoredUnresolvable]; got != 6 {
		t.Errorf("%d reports counted as %s, want 6 (two in each of three observations)", got, IgnoredUnresolvable)
	}
}

func TestCDIDeviceIDsResolveThroughTheClaim(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	single := w.running("single", []Device{gpu0}, health("gpu.example.com/gpu=gpu-0", v1.ResourceHealthStatusUnhealthy, ""))
	double := w.running("double", []Device{gpu0, gpu1}, health("gpu.example.com/gpu=gpu-1", v1.ResourceHealthStatusUnhealthy, ""))
	gone := w.running("gone", []Device{gpu1}, health("gpu.example.com/gpu=gpu-1", v1.ResourceHealthStatusUnhealthy, ""))
	delete(w.claims, "default/claim-gone")
	for _, pod := range []*v1.Pod{single, double, gone} {
		c.ObservePod(logger, pod)
	}
	if got := c.Unhealthy(); len(got) != 1 || got[0].Device != gpu0 {
		t.Errorf("Unhealthy %v, want only gpu-0 (the one device of claim-single)", got)
	}
}

func TestNewHealthyReports(t *testing.T) {
	unhealthy := reporting("p", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusUnhealthy, ""))
	healthy := reporting("p", health("gpu.example.com/node-1/gpu-0", v1.ResourceHealthStatusHealthy, ""))
	plain := reporting("p")
	for name, tc := range map[string]struct {
		old, pod *v1.Pod
		want     bool
	}{
		"Unhealthy to Healthy":    {old: unhealthy, pod: healthy, want: true},
		"new pod reports Healthy": {pod: healthy, want: true},
		"still Healthy":           {old: healthy, pod: healthy},
		"Healthy to Unhealthy":    {old: healthy, pod: unhealthy},
		"no reports":              {old: plain, pod: plain},
	} {
		t.Run(name, func(t *testing.T) {
			if got := NewHealthyReports(tc.old, tc.pod); got != tc.want {
				t.Errorf("NewHealthyReports = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzParseResourceID: any string either parses into a device that prints
// back as the same ID, or is refused; nothing panics.
func FuzzParseResourceID(f *testing.F) {
	for _, seed := range []string{"gpu.example.com/node-1/gpu-0", "a/b/c/d", "gpu.example.com/gpu=gpu-0", "//", "a//b", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		d, err := ParseResourceID(id)
		if err == nil && d.String() != id {
			t.Errorf("%q parsed into %+v, which prints as %q", id, d, d.String())
		}
	})
}

// A long message is cut on a character boundary: half a UTF-8 character
// would reach the ResourcePool as U+FFFD and never read back equal.
func TestDetailCutsLongMessagesOnACharacter(t *testing.T) {
	r := Report{Pod: "ns/p", Since: time.Unix(0, 0), Message: "x" + strings.Repeat("é", maxMessage)}
	detail := r.Detail()
	if !utf8.ValidString(detail) {
		t.Errorf("detail is not valid UTF-8: %q", detail)
	}
	if !strings.HasSuffix(detail, "é...") {
		t.Errorf("detail %q does not end with whole characters and ...", detail[len(detail)-10:])
	}
}

// A pod that fails to start goes from bound to Failed at once: when the
// scheduler saw it bound, its claim's allocation had not reached the
// informer yet. The claim event completes the holding.
func TestClaimEventCompletesTheHolding(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, _, w := newTestCache(t)
	job := w.running("job", []Device{gpu0})
	claim := w.claims["default/claim-job"]
	delete(w.claims, "default/claim-job")
	c.ObservePod(logger, job) // bound; the claim is not in the informer yet
	c.observeClaim(logger, claim)
	c.ObservePod(logger, w.failed(job, unhealthy(gpu0, "Xid 79")))
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("gpu-0: %s, want Unhealthy", got)
	}
}

// An operator's clear ends the Unhealthy state as it stood at the request,
// whoever reported it, and nothing after: a report made later, or a new
// report of the same pod, holds the device again; a clear requested before
// the device went Unhealthy clears nothing.
func TestOperatorClear(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	trainer := w.running("trainer", []Device{gpu0}, unhealthy(gpu0, "Xid 79"))
	c.ObservePod(logger, trainer)
	other := w.running("other", []Device{gpu0}, unhealthy(gpu0, "Xid 48"))
	c.ObservePod(logger, other)

	if c.Clear(logger, gpu0, clk.Now().Add(-time.Hour)) {
		t.Error("a clear requested before the device went Unhealthy cleared it")
	}
	clk.Step(time.Minute)
	if !c.Clear(logger, gpu0, clk.Now()) {
		t.Fatal("Clear of an Unhealthy device cleared nothing")
	}
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnknown || r.Message != "cleared by an operator" {
		t.Fatalf("gpu-0 after the clear: %+v, want Unknown, cleared by an operator", r)
	}
	if got := unhealthyIDs(c); got.Len() != 0 {
		t.Errorf("withheld after the clear: %v", got)
	}
	// The same statuses again (a resync, the rule's update event): still
	// cleared.
	c.ObservePod(logger, trainer.DeepCopy())
	c.ObservePod(logger, other.DeepCopy())
	if got := healthOf(c, gpu0); got == v1.ResourceHealthStatusUnhealthy {
		t.Fatalf("gpu-0 after unchanged statuses were seen again: %s", got)
	}
	// A new report after the clear counts.
	clk.Step(time.Minute)
	again := trainer.DeepCopy()
	again.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources = []v1.ResourceHealth{unhealthy(gpu0, "Xid 79 again")}
	c.ObservePod(logger, again)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || r.Message != "Xid 79 again" {
		t.Errorf("gpu-0 after a new report: %+v, want Unhealthy", r)
	}
	if c.Clear(logger, gpu0, clk.Now().Add(-30*time.Second)) {
		t.Error("the first clear, seen again, cleared a report made after it")
	}
}

// A clear requested in the same second as the report, written to the
// second as kubectl dra writes it, clears it.
func TestOperatorClearInTheReportsSecond(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	clk.SetTime(clk.Now().Add(700 * time.Millisecond))
	c.ObservePod(logger, w.running("trainer", []Device{gpu0}, unhealthy(gpu0, "Xid 79")))
	if !c.Clear(logger, gpu0, clk.Now().Truncate(time.Second)) {
		t.Error("a clear written in the report's second cleared nothing")
	}
}

// The time of a clear is the apiserver's, from the managedFields entry of
// the write that set the annotation, not the client's value; a rule whose
// report is newer than its clear is restored all the same.
func TestClearRequestedUsesTheServersTime(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	_, clk, _ := newTestCache(t)
	reported := clk.Now().Add(-time.Minute)
	rule := RuleFor(Report{Device: gpu0, Health: v1.ResourceHealthStatusUnhealthy, PodUID: "uid-job", Node: "node-1", Since: reported})
	server := metav1.NewTime(reported.Add(-time.Hour))
	rule.Annotations[AnnotationClearRequested] = clk.Now().Format(time.RFC3339) // a client clock an hour ahead
	rule.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "drascope-scheduler", Time: &metav1.Time{Time: reported}, FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:drascope.dev/reporter-uid":{}}}}`)},
		{Manager: "kubectl-dra", Time: &server, FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{"f:drascope.dev/clear-requested-at":{}}}}`)},
	}
	if at, ok := ClearRequested(rule); !ok || !at.Equal(server.Time) {
		t.Errorf("ClearRequested = %v, %v; want the server's time %v", at, ok, server.Time)
	}
	// The report came after that clear: the rule still persists it.
	c, _, _ := newTestCache(t)
	c.Restore(logger, rule)
	if got := healthOf(c, gpu0); got != v1.ResourceHealthStatusUnhealthy {
		t.Errorf("a rule whose report is newer than its clear restored as %s, want Unhealthy", got)
	}
}

// A finished pod's report, held from its finish, never shortens a hold
// that runs already.
func TestFinishedReportKeepsTheLongerHold(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, clk, w := newTestCache(t)
	trainer := w.running("trainer", []Device{gpu0}, unhealthy(gpu0, "Xid 79"))
	c.ObservePod(logger, trainer)
	c.podLeft(logger, trainer.UID, false)
	held, _ := c.Get(gpu0)
	job := w.running("job", []Device{gpu0})
	c.ObservePod(logger, job)
	final := w.failed(job, unhealthy(gpu0, "Xid 79"))
	final.Status.ContainerStatuses[0].State.Terminated = &v1.ContainerStateTerminated{FinishedAt: metav1.NewTime(clk.Now().Add(-5 * time.Minute))}
	c.ObservePod(logger, final)
	if r, _ := c.Get(gpu0); r.Health != v1.ResourceHealthStatusUnhealthy || r.HeldUntil.Before(held.HeldUntil) {
		t.Errorf("gpu-0 after a report of a pod that finished 5 minutes ago: %+v, want held until %v at least", r, held.HeldUntil)
	}
}
