package poolpublisher

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Lease is where replicas elect the one that publishes. It is separate from
// the scheduler's own lease, which plugins cannot see; when the two leaders
// differ, the publishing replica lacks only the other's in-flight
// allocations, which its informers see within moments.
const (
	LeaseNamespace = "kube-system"
	LeaseName      = "drascope-resourcepool-publisher"
)

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
// until ctx ends; it returns once it has stopped trying for the lease (and
// released it). run's context ends when the lease is lost.
func RunWhileLeading(ctx context.Context, client kubernetes.Interface, identity string, run func(context.Context)) {
	logger := klog.FromContext(ctx).WithValues("lease", LeaseNamespace+"/"+LeaseName, "identity", identity)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: LeaseNamespace, Name: LeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					logger.Info("Acquired the ResourcePool publisher lease")
					run(ctx)
				},
				OnStoppedLeading: func() {
					logger.Info("Stopped publishing ResourcePools: lease released or lost")
				},
			},
		})
	}, time.Second)
}
