package integration

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// The fault tests end as every scenario does (no device in two claims), and
// also check that no pending pod's claim kept an allocation and that every
// ResourcePool equals a recount of the apiserver's slices and claims. They
// log the recovery times docs/reliability.md quotes; timing goals are not
// asserted here (see docs/development.md), except, in (e), the delay the
// publisher promises (maxPublishDelay, 10s), which is its behaviour, not a
// speed.

// leaseTiming is short, so that a takeover takes seconds; the shipped
// config keeps kube-scheduler's defaults (15s, 10s, 2s).
const leaseTiming = "  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 500ms\n"

// (a) Two replicas under leader election; the leader is killed (SIGKILL)
// while 160 pods are being placed on 128 GPUs, and the standby finishes.
// (c) Then the new leader's Lease is taken from it: it exits, as
// kube-scheduler does on losing leadership; its replacement wins the Lease
// once it expires, and places what was freed meanwhile.
func TestLeaderFailoverMidBurst(t *testing.T) {
	restartScheduler(t, func() {
		ctx := context.Background()
		a, leaderA, b := leaderAndStandby(t, leaseTiming)

		s := newScenario(t, nil)
		pools := s.gpuNodes(16, 8)
		s.burst("pod", 160, schedulerName)
		s.waitForBound(40)

		bound, _, _ := s.placement()
		killed := time.Now()
		a.Kill()
		if bound >= 128 {
			t.Fatalf("all 128 GPUs were placed before the leader was killed: nothing was in flight; make the burst larger")
		}
		leaderB, tookOver := waitForLeaseHolder(t, leaderA)
		r := s.recoverAfter(killed, 160, 128, pools)
		t.Logf("leader killed with %d of 128 GPUs placed: Lease taken over after %s; next placement: %s; placement settled %s after the kill; ResourcePools matched the API %s after the last placement",
			bound, since(killed, tookOver), r.next, since(killed, r.settled), since(r.settled, r.matched))

		// (c) The Lease is taken from the new leader, as when it cannot
		// renew in time.
		// The leader renews every 500ms: retry on its updates.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			lease, err := env.client.CoordinationV1().Leases(schedulerNamespace).Get(ctx, schedulerName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.NewMicroTime(time.Now())
			lease.Spec.HolderIdentity = ptr.To("intruder")
			lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
			lease.Spec.LeaseDurationSeconds = ptr.To[int32](4)
			_, err = env.client.CoordinationV1().Leases(schedulerNamespace).Update(ctx, lease, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatalf("taking the Lease from %s: %v", leaderB, err)
		}
		lost := time.Now()
		select {
		case <-b.Done():
		case <-time.After(waitTimeout):
			t.Fatalf("the replica that lost its Lease kept running")
		}
		exited := time.Now()
		var exitErr *exec.ExitError
		if !errors.As(b.Err(), &exitErr) || exitErr.ExitCode() == 0 || !strings.Contains(strings.ToLower(b.output()), "leaderelection lost") {
			t.Errorf("the replica that lost its Lease: exit %v, want a non-zero exit after %q", b.Err(), "Leaderelection lost")
		}

		// While nobody leads, 16 pods finish: their GPUs are freed.
		_, _, pods := s.placement()
		deleted := 0
		for _, pod := range pods {
			if pod.Spec.NodeName == "" || deleted == 16 {
				continue
			}
			if err := env.client.CoreV1().Pods(s.namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
		c := startReplica(t, "replica-c", leaseTiming)
		_, regained := waitForLeaseHolder(t, "intruder")
		r = s.recoverAfter(regained, 144, 128, pools)
		t.Logf("Lease taken from the leader: it exited after %s; its replacement led %s after the theft; next placement: %s; placement settled %s after it led; ResourcePools matched the API %s after the last placement",
			since(lost, exited), since(lost, regained), r.next, since(regained, r.settled), since(r.settled, r.matched))
		// Before the in-process scheduler comes back: one scheduler at a time.
		c.stop()
	})
}

// (b) kube-apiserver is killed (SIGKILL) while 80 pods are being placed on
// 64 GPUs by the in-process scheduler, and started again 2s later.
func TestAPIServerRestartMidBurst(t *testing.T) {
	s := newScenario(t, nil)
	pools := s.gpuNodes(8, 8)
	s.burst("pod", 80, schedulerName)
	s.waitForBound(16)

	bound, _, _ := s.placement()
	if bound >= 64 {
		t.Fatalf("all 64 GPUs were placed before kube-apiserver was killed: nothing was in flight; make the burst larger")
	}
	killed := time.Now()
	if err := env.cp.RestartAPIServer(context.Background(), 2*time.Second); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	ready := time.Now()
	r := s.recoverAfter(ready, 80, 64, pools)
	t.Logf("kube-apiserver killed with %d of 64 GPUs placed, ready again after %s; next placement: %s; placement settled %s after it was ready; ResourcePools matched the API %s after the last placement (%s after the apiserver was ready)",
		bound, since(killed, ready), r.next, since(ready, r.settled), since(r.settled, r.matched), since(ready, r.matched))
}

// shortLeaseTiming is the short leader election under which a ResourcePool
// change was once lost across a failover.
const shortLeaseTiming = "  leaseDuration: 6s\n  renewDeadline: 4s\n  retryPeriod: 1s\n"

// (d) Both faults at once, as they once lost a ResourcePool change (with that lease timing):
// the leader is killed mid-burst, kube-apiserver 2s later, down for 3s.
// The standby takes over and places the rest. Every ResourcePool must
// equal a recount of the apiserver's slices and claims within
// maxPublishDelay (10s, the shipped config) of the last placement, and
// stay equal. The report saw them right
// only 20-22s after it; here the publisher from before the deadline plan
// matched within 0.04-3.15s in six runs, so this does not reproduce that
// report: it holds the publisher to the delay it promises, with both
// faults at once.
func TestLeaderFailoverWithAPIServerRestart(t *testing.T) {
	restartScheduler(t, func() {
		ctx := context.Background()
		a, leaderA, b := leaderAndStandby(t, shortLeaseTiming)

		s := newScenario(t, nil)
		pools := s.gpuNodes(16, 8)
		s.burst("pod", 160, schedulerName)
		s.waitForBound(35)

		bound, _, _ := s.placement()
		killed := time.Now()
		a.Kill()
		if bound >= 128 {
			t.Fatalf("all 128 GPUs were placed before the leader was killed: nothing was in flight; make the burst larger")
		}
		time.Sleep(2 * time.Second)
		if err := env.cp.RestartAPIServer(ctx, 3*time.Second); err != nil {
			t.Fatalf("restarting kube-apiserver: %v", err)
		}
		ready := time.Now()
		_, tookOver := waitForLeaseHolder(t, leaderA)
		r := s.recoverAfter(ready, 160, 128, pools)
		t.Logf("leader killed with %d of 128 GPUs placed, kube-apiserver ready again %s later; Lease taken over %s after the kill; next placement: %s; placement settled %s after the apiserver was ready; ResourcePools matched the API %s after the last placement",
			bound, since(killed, ready), since(killed, tookOver), r.next, since(ready, r.settled), since(r.settled, r.matched))
		if lag := r.matched.Sub(r.settled); lag > 10*time.Second {
			t.Errorf("ResourcePools matched the API %s after the last placement; want within maxPublishDelay (10s)", lag.Round(10*time.Millisecond))
		}
		// And they stay equal: no late write of an older view.
		for range 10 {
			time.Sleep(300 * time.Millisecond)
			if mismatch := s.poolMismatch(ctx, pools); mismatch != "" {
				t.Fatalf("ResourcePools matched the API, then no longer: %s", mismatch)
			}
		}
		// The publisher's queue is KEP-5677's, with client-go's workqueue
		// metrics.
		if got := counterAt(t, b.port, "workqueue_adds_total", map[string]string{"name": "resourcepool"}); got == 0 {
			t.Errorf("workqueue_adds_total{name=\"resourcepool\"} on the new leader: %v, want the publisher's queue counted", got)
		}
		b.stop()
	})
}

// (f) A pod refused because another pod's allocation was in flight is
// retried when that allocation's write fails: the failed write leaves a
// release hold, and when the hold ends no informer event announces the
// free device (upstream's hints skip a change of another pod's claim that
// removes no allocation, and its binding failure's AssignedPodDelete event
// reaches no DRA hint). CI caught it as TestAPIServerRestartMidBurst
// leaving 2 of 64 GPUs free for three minutes. Here a webhook holds the
// first pod's allocation write for a second and refuses it, while the
// second pod is refused for the only GPU; it must then be placed long
// before the scheduling queue's five-minute flush.
func TestPodRefusedForAFailedWriteIsRetried(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("a", 1)
	s.addClaim("refused", false)
	s.addClaim("waiting", false)
	w := startCountingWebhook(t)
	w.refuseWith(func(req *admissionv1.AdmissionRequest) (time.Duration, string) {
		if req.Resource.Resource == "resourceclaims" && req.SubResource == "status" && req.Name == "refused" {
			return time.Second, "allocation refused by the test"
		}
		return 0, ""
	})
	s.addCountingWebhookConfig(w, s.namespace+"-refuse")
	s.waitForWebhookConfig(w, node, true)

	s.addPod("first", schedulerName, fromClaim("refused"))
	if err := wait.PollUntilContextTimeout(s.ctx, 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return w.count("UPDATE resourceclaims/status") > 0, nil
	}); err != nil {
		t.Fatalf("first's allocation was never written: %s", describeScheduling(s.getPod("first")))
	}
	// first's allocation is in flight for a second, in the webhook.
	s.addPod("second", schedulerName, fromClaim("waiting"))
	created := time.Now()
	refused := false
	var second *v1.Pod
	err := wait.PollUntilContextTimeout(s.ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		second = s.getPod("second")
		if c := scheduledCondition(second); c != nil && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
			refused = true
		}
		return second.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("second was not placed within 30s although first's write was refused (refused first: %v): %s; first: %s", refused, describeScheduling(second), describeScheduling(s.getPod("first")))
	}
	if !refused {
		t.Fatalf("second was placed without being refused first (%s): first's allocation was no longer in flight, and this run proves nothing", describeScheduling(second))
	}
	t.Logf("second was refused while first's allocation was in flight, and placed %s after it was created", since(created, time.Now()))
}
