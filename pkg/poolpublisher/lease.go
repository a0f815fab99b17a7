package poolpublisher

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
)

// Replicas elect the one that publishes on the lease
// v1alpha1.PublisherLeaseNamespace/PublisherLeaseName. It is separate from
// the scheduler's own lease, which plugins cannot see; when the two leaders
// differ, the publishing replica lacks only the other's in-flight
// allocations, which its informers see within moments.

// LeaseIdentity is this process's identity on the publisher lease: the
// host name, made unique per process.
func LeaseIdentity() (string, error) {
	hostname, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("publisher lease identity: %w", err)
	}
	return hostname + "_" + string(uuid.NewUUID()), nil
}

// RunWhileLeading runs run whenever this process holds the publisher lease,
// until ctx ends; it returns once it has stopped trying for the lease and
// the last term's run has returned. run's context ends when the lease is
// lost. client-go starts OnStartedLeading in a goroutine of its own and does
// not wait for it; here that callback only hands the term to a runner this
// function waits for, so no term outlives it.
func RunWhileLeading(ctx context.Context, client kubernetes.Interface, identity string, run func(context.Context)) {
	logger := klog.FromContext(ctx).WithValues("lease", v1alpha1.PublisherLeaseNamespace+"/"+v1alpha1.PublisherLeaseName, "identity", identity)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: v1alpha1.PublisherLeaseNamespace, Name: v1alpha1.PublisherLeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	terms := make(chan context.Context)
	var runner sync.WaitGroup
	runner.Go(func() {
		for {
			select {
			case term := <-terms:
				run(term)
			case <-ctx.Done():
				return
			}
		}
	})
	defer runner.Wait()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            v1alpha1.PublisherLeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(term context.Context) {
					logger.Info("Acquired the ResourcePool publisher lease")
					select {
					case terms <- term:
					case <-term.Done():
					}
				},
				OnStoppedLeading: func() {
					logger.Info("Stopped publishing ResourcePools: lease released or lost")
				},
			},
		})
	}, time.Second)
}
