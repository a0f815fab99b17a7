package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// The scheduling path of one drascope-scheduler process (binding, claim
// status, ResourcePools, device taints, hold and conflict checks, and the
// informers' lists) spends one API budget, the scheduler client's
// clientConnection.qps and burst: the apiserver's audit log of the
// scheduler's requests, over a burst that keeps both the scheduler and a
// publisher allowed to write at will busy, never shows more than the
// token bucket grants. Upstream gives leader election and events clients
// of their own, with their own budgets; those are counted apart. (Its
// clients share one user agent, "<binary>/<version> ... /scheduler":
// kube-scheduler's AddUserAgent sets it on the config they are all made
// from. Events are told apart by their resource.)
func TestOneAPIBudgetForTheSchedulingPath(t *testing.T) {
	const qps, burst = 20, 20
	restartScheduler(t, func() {
		// 64 pools, and a publisher that writes each busy pool five
		// times a second, at any rate: only the shared budget holds it
		// back.
		config := shippedConfigWith(t,
			"  leaderElect: true\n", "  leaderElect: false\n",
			"      deviceChoice: BestFit\n", "      deviceChoice: BestFit\n      poolStatus:\n        minPublishInterval: 100ms\n        maxPublishDelay: 200ms\n        maxWritesPerSecond: 1000\n        maxCreationsPerSecond: 1000\n")
		path, err := writeTempConfig("budget", config, env.schedulerKubeconfig,
			fmt.Sprintf("  qps: %d", qps), fmt.Sprintf("  burst: %d", burst))
		if err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		b, _ := runSchedulerBinary(t, "budget", path)

		s := newScenario(t, nil)
		s.gpuNodes(64, 1)
		s.burst("pod", 64, schedulerName)
		s.waitForBound(64)
		b.stop()

		var budgeted []auditv1.Event
		byClient := map[string]int{}
		byKind := map[string]int{}
		for _, e := range schedulerRequests(t, started) {
			c := client(e)
			if e.ObjectRef != nil && e.ObjectRef.Resource == "events" {
				// Upstream's event broadcaster has a client of its own,
				// with the same user agent.
				c = "events"
			}
			byClient[c]++
			// client-go does not rate-limit watches: each informer
			// opens one, and keeps it.
			if (c == "scheduler" || c == "resourcepools") && e.Verb != "watch" {
				budgeted = append(budgeted, e)
				byKind[c+": "+requestKind(e)]++
			}
		}
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(byKind)) {
			kinds = append(kinds, fmt.Sprintf("%5d %s", byKind[k], k))
		}
		t.Logf("requests of the scheduler's user by client: %v; of the budgeted clients, by kind:\n%s", byClient, strings.Join(kinds, "\n"))
		if byClient["resourcepools"] == 0 {
			t.Fatalf("no ResourcePool request in the audit log: the publisher did not run, and the budget is not tested")
		}

		// A token bucket grants at most burst + qps*d requests in any
		// span of time d. The apiserver's clock sees each request a little
		// after the limiter let it go, never before, and a stall of the
		// loaded machine may gather some: allow a second's worth. A
		// publisher with a bucket of its own would add its 64 pools'
		// creates and updates on top.
		slack := qps
		most, from, to := 0.0, 0, 0
		for i := range budgeted {
			for j := i; j < len(budgeted); j++ {
				d := budgeted[j].RequestReceivedTimestamp.Sub(budgeted[i].RequestReceivedTimestamp.Time)
				if excess := float64(j-i+1) - qps*d.Seconds(); excess > most {
					most, from, to = excess, i, j
				}
			}
		}
		d := budgeted[to].RequestReceivedTimestamp.Sub(budgeted[from].RequestReceivedTimestamp.Time)
		t.Logf("%d budgeted requests in %s; the most beyond qps*d: %d requests in %s (from %s), %.1f beyond; allowed burst %d + %d",
			len(budgeted), since(started, time.Now()), to-from+1, d.Round(time.Millisecond), since(started, budgeted[from].RequestReceivedTimestamp.Time), most, burst, slack)
		if most > burst+float64(slack) {
			t.Errorf("%d requests of the scheduling path within %s: %.1f more than qps*d, more than the burst clientConnection allows (qps %d, burst %d): they do not share one budget",
				to-from+1, d.Round(time.Millisecond), most, qps, burst)
		}
	})
}
