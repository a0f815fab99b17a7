package integration

import (
	"context"
	"os"

	"github.com/drascope/drascope/internal/localcluster"
)

// controlPlane is a real etcd and a real kube-apiserver, both binaries built
// by the Makefile from the versions go.mod pins, listening on loopback only.
type controlPlane struct {
	*localcluster.ControlPlane
}

// workloadGates turn on upstream's workload-aware scheduling and
// ResourceClaims for a whole PodGroup in every component: the apiserver,
// the in-process claim controller, the in-process scheduler and
// upstream's (startUpstreamScheduler). All scenarios run with them on, so
// that each feature is tested beside gangs; a pod that names no PodGroup
// is scheduled as it is with the gates off.
var workloadGates = localcluster.WorkloadGates

// adminToken authenticates as a member of system:masters.
const adminToken = "drascope-integration-admin"

func startControlPlane(ctx context.Context, binDir string) (*controlPlane, error) {
	cp, err := localcluster.Start(ctx, localcluster.Options{
		BinDir: binDir, AdminToken: adminToken,
		FeatureGates: workloadGates, RuntimeConfig: []string{localcluster.WorkloadAPI},
		AuditPolicy: auditPolicy,
	})
	if err != nil {
		return nil, err
	}
	return &controlPlane{cp}, nil
}

// stop stops every process and removes the data and logs, unless
// DRASCOPE_KEEP_TEST_DATA is set.
func (cp *controlPlane) stop() {
	cp.Stop()
	if os.Getenv("DRASCOPE_KEEP_TEST_DATA") == "" {
		_ = os.RemoveAll(cp.Dir)
	}
}
