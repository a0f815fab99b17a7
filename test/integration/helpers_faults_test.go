package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/poolstatus"
)

// gpuNodes adds n nodes of gpus GPUs each, and the claim template "gpu";
// it returns the nodes, which are also the pools.
func (s *scenario) gpuNodes(n, gpus int) []string {
	s.t.Helper()
	var nodes []string
	for i := range n {
		nodes = append(nodes, s.addNode(fmt.Sprintf("n%02d", i), gpus))
	}
	s.addClaimTemplate("gpu", false)
	return nodes
}

// burstGate holds a burst's pods back until all of them exist.
const burstGate = "drascope.test/burst"

// burst creates n pods for scheduler, each with its own claim from the
// template "gpu", named <prefix>-<i>, and then lets the scheduler see them
// all at once. Created one by one they would reach the scheduler at the
// pace of the creates, and on a loaded machine a scheduler that keeps up
// places each pod as it comes: a fault test would then find nothing in
// flight. So every pod is created behind a scheduling gate, and the gates
// are lifted together, by parallel patches.
func (s *scenario) burst(prefix string, n int, scheduler string) []string {
	s.t.Helper()
	names := make([]string, n)
	gated := func(pod *v1.Pod) { pod.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: burstGate}} }
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
		s.addPodWith(names[i], scheduler, fromTemplate("gpu"), gated)
	}
	s.liftGates(names)
	return names
}

// liftGates removes the scheduling gates of the named pods, several at a
// time.
func (s *scenario) liftGates(names []string) {
	s.t.Helper()
	const workers = 16
	lift := []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`)
	next := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for name := range next {
				if _, err := env.client.CoreV1().Pods(s.namespace).Patch(s.ctx, name, types.JSONPatchType, lift, metav1.PatchOptions{}); err != nil {
					errs <- fmt.Errorf("lifting the scheduling gate of %s: %w", name, err)
				}
			}
		})
	}
	for _, name := range names {
		next <- name
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatal(err)
	}
}

// placement counts the scenario's pods: bound, and pending with the
// scheduler's Unschedulable verdict.
func (s *scenario) placement() (bound, unschedulable int, pods []v1.Pod) {
	s.t.Helper()
	list, err := env.client.CoreV1().Pods(s.namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatalf("listing pods: %v", err)
	}
	for _, pod := range list.Items {
		switch c := scheduledCondition(&pod); {
		case pod.Spec.NodeName != "":
			bound++
		case c != nil && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable:
			unschedulable++
		}
	}
	return bound, unschedulable, list.Items
}

// waitForBound waits until at least n pods are bound, and returns when.
func (s *scenario) waitForBound(n int) time.Time {
	s.t.Helper()
	var bound int
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, 3*waitTimeout, true, func(context.Context) (bool, error) {
		bound, _, _ = s.placement()
		return bound >= n, nil
	})
	if err != nil {
		s.t.Fatalf("%d pods bound, want at least %d", bound, n)
	}
	return time.Now()
}

// waitForSettled waits until bound pods fill every one of gpus devices and
// every other pod is Unschedulable, and returns when it saw that.
func (s *scenario) waitForSettled(pods, gpus int) time.Time {
	s.t.Helper()
	var bound, unschedulable int
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, 3*waitTimeout, true, func(context.Context) (bool, error) {
		bound, unschedulable, _ = s.placement()
		return bound == min(pods, gpus) && bound+unschedulable == pods, nil
	})
	if err != nil {
		s.t.Fatalf("placement did not settle: %d bound, %d unschedulable of %d pods on %d GPUs", bound, unschedulable, pods, gpus)
	}
	return time.Now()
}

// recovered is how placement and ResourcePools came back after a fault.
type recovered struct {
	// next is how long after the fault the next pod was placed.
	next             string
	settled, matched time.Time
}

// recoverAfter waits, after a fault that ended at from, for the next
// placement, for placement to settle (pods on gpus GPUs) and for every
// pool's ResourcePool to match the API; then it checks that no pending
// pod's claim holds anything.
func (s *scenario) recoverAfter(from time.Time, pods, gpus int, pools []string) recovered {
	s.t.Helper()
	r := recovered{next: fmt.Sprintf("none needed (all %d placed by then)", gpus)}
	if now, _, _ := s.placement(); now < gpus {
		r.next = since(from, s.waitForBound(now+1)) + " later"
	}
	r.settled = s.waitForSettled(pods, gpus)
	r.matched = s.waitForPoolsToMatchTheAPI(pools)
	s.checkNoAllocationForPendingPods()
	return r
}

// checkNoAllocationForPendingPods: a pod that is not bound holds no
// allocated claim, whatever happened while it was being placed.
func (s *scenario) checkNoAllocationForPendingPods() {
	s.t.Helper()
	_, _, pods := s.placement()
	for i := range pods {
		if pods[i].Spec.NodeName != "" {
			continue
		}
		if claim := s.podClaim(&pods[i]); claim.Status.Allocation != nil || len(claim.Status.ReservedFor) > 0 {
			s.t.Errorf("pending pod %s: its claim %s is allocated (%v) or reserved (%v)", pods[i].Name, claim.Name, claim.Status.Allocation != nil, claim.Status.ReservedFor)
		}
	}
}

// waitForPoolsToMatchTheAPI waits until the ResourcePool of each pool says
// what a recount of the apiserver's slices and claims says (summary, and
// each listed device's state and reason), and returns when it first did.
func (s *scenario) waitForPoolsToMatchTheAPI(pools []string) time.Time {
	s.t.Helper()
	var mismatch string
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, 2*waitTimeout, true, func(ctx context.Context) (bool, error) {
		mismatch = s.poolMismatch(ctx, pools)
		return mismatch == "", nil
	})
	if err != nil {
		s.t.Fatalf("ResourcePools do not match the API: %s", mismatch)
	}
	return time.Now()
}

// poolMismatch describes the first pool whose ResourcePool differs from a
// recount, or returns "".
func (s *scenario) poolMismatch(ctx context.Context, pools []string) string {
	recount, err := usageFromAPI(ctx, s.namespace)
	if err != nil {
		return err.Error()
	}
	for _, pool := range pools {
		usage, ok := recount[pool]
		if !ok {
			return "no slices for pool " + pool
		}
		want := poolstatus.For(&usage, "", nil, time.Now())
		rp, err := resourcePools(s.t).Get(ctx, poolObjectName(s.t, pool), metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("pool %s: %v", pool, err)
		}
		if got := rp.Status.Summary; got == nil || *got != *want.Summary {
			return fmt.Sprintf("pool %s: summary %+v, the API says %+v", pool, got, want.Summary)
		}
		state := func(d v1alpha1.DeviceStatus) string { return d.Name + "=" + d.State + "/" + d.Reason }
		var gotDevices, wantDevices []string
		for _, d := range rp.Status.Devices {
			gotDevices = append(gotDevices, state(d))
		}
		for _, d := range want.Devices {
			wantDevices = append(wantDevices, state(d))
		}
		if !slices.Equal(gotDevices, wantDevices) {
			return fmt.Sprintf("pool %s: devices %v, the API says %v", pool, gotDevices, wantDevices)
		}
	}
	return ""
}

// startReplica runs bin/drascope-scheduler with the shipped config (leader
// election on, with the given lease timing) as one replica of a
// Deployment, authenticating as the ServiceAccount.
func startReplica(t *testing.T, name string, lease string) *schedulerBinary {
	t.Helper()
	config, err := writeTempConfig(name, shippedConfigWith(t, "  leaderElect: true\n", "  leaderElect: true\n"+lease), env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := runSchedulerBinary(t, name, config)
	return b
}

// leaderAndStandby starts replica-a, waits until it holds the scheduler
// Lease, then starts replica-b as its standby; both with the given
// leader-election timing.
func leaderAndStandby(t *testing.T, lease string) (a *schedulerBinary, leaderA string, b *schedulerBinary) {
	t.Helper()
	previous := ""
	if l := schedulerLease(context.Background()); l != nil {
		previous = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	a = startReplica(t, "replica-a", lease)
	leaderA, _ = waitForLeaseHolder(t, previous)
	b = startReplica(t, "replica-b", lease)
	return a, leaderA, b
}

// schedulerLease returns the scheduler's leader-election Lease, or nil.
func schedulerLease(ctx context.Context) *coordinationv1.Lease {
	lease, err := env.client.CoordinationV1().Leases(schedulerNamespace).Get(ctx, schedulerName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return lease
}

// waitForLeaseHolder waits until the scheduler Lease is held by someone
// other than not (any holder when not is ""), and returns the holder and
// when it was seen.
func waitForLeaseHolder(t *testing.T, not string) (string, time.Time) {
	t.Helper()
	holder := ""
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		if lease := schedulerLease(ctx); lease != nil && lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("the scheduler Lease is held by %q, want a new holder", holder)
	}
	return holder, time.Now()
}

// since formats a duration for the recovery figures the fault tests log.
func since(from, to time.Time) string { return to.Sub(from).Round(10 * time.Millisecond).String() }
