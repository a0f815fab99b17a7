package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/drascope/drascope/internal/localcluster"
)

// controlPlane is a real etcd and a real kube-apiserver, both binaries built
// by the Makefile from the versions go.mod pins, listening on loopback only.
type controlPlane struct {
	*localcluster.ControlPlane
}

// workloadGates turn on upstream's workload-aware scheduling (the
// PodGroup API and gang scheduling) and ResourceClaims for a whole
// PodGroup, both beta and off by default in 1.37, in every component: the
// apiserver, the in-process claim controller, the in-process scheduler and
// upstream's (startUpstreamScheduler). All
// scenarios run with them on, so that each feature is tested beside gangs;
// a pod that names no PodGroup is scheduled as it is with the gates off.
var workloadGates = map[string]bool{"GenericWorkload": true, "DRAWorkloadResourceClaims": true}

// workloadAPI serves the PodGroup API, whose version is off by default.
const workloadAPI = "scheduling.k8s.io/v1beta1=true"

// workloadGatesFlag is workloadGates as a component's flag.
func workloadGatesFlag() string {
	var pairs []string
	for _, name := range slices.Sorted(maps.Keys(workloadGates)) {
		pairs = append(pairs, fmt.Sprintf("%s=%t", name, workloadGates[name]))
	}
	return "--feature-gates=" + strings.Join(pairs, ",")
}

// adminToken authenticates as a member of system:masters.
const adminToken = "drascope-integration-admin"

func startControlPlane(ctx context.Context, binDir string) (*controlPlane, error) {
	cp, err := localcluster.Start(ctx, localcluster.Options{
		BinDir: binDir, AdminToken: adminToken,
		FeatureGates: workloadGates, RuntimeConfig: []string{workloadAPI},
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
