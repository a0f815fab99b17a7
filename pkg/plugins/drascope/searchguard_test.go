package drascope

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/drascope/drascope/pkg/whatif"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/pkg/dryrun"
)

// claimOfOneGPURequests is one claim with n requests of one GPU each: the
// allocator's worst case on a node of identical GPUs.
func claimOfOneGPURequests(n int) *resourceapi.ResourceClaim {
	claim := captureClaim("mine")
	claim.Spec.Devices.Requests = nil
	for i := range n {
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("gpu-%d", i), Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: captureDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		})
	}
	return claim
}

// A pod asking a node of sixteen free GPUs for seventeen is refused by a
// count, as upstream's Filter refuses claims it finds no devices for,
// without upstream's search, which tries every assignment first. Filter
// runs on a context already cancelled: upstream's allocator stops at its
// first check of the context and refuses with "asked by caller to stop
// allocating devices", so only a refusal that ran no search gives
// upstream's reason for claims that do not fit. A pod that fits is still
// placed.
func TestFilterCountsBeforeUpstreamSearches(t *testing.T) {
	for _, tc := range []struct {
		requests int
		guarded  bool
		fits     bool
	}{
		{requests: 17, guarded: true},
		{requests: 16, guarded: true, fits: true},
		{requests: whatif.GuardedFrom - 1, fits: true},
	} {
		t.Run(fmt.Sprintf("%d on 16", tc.requests), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			fts := feature.Features{EnableDynamicResourceAllocation: true}
			pl, _, _, pod, nodes := heldClusterFor(ctx, t, claimOfOneGPURequests(tc.requests), []string{"node-0"}, 16,
				func(string, int) bool { return true }, fts)
			pl.allocating = dryrun.Allocating{Features: dynamicresources.AllocatorFeatures(fts), Classes: pl.manager.DeviceClasses(), CEL: cel.NewCache(10, cel.Features{})}

			state := framework.NewCycleState()
			if _, status := pl.PreFilter(ctx, state, pod, nodes); !status.IsSuccess() {
				t.Fatalf("PreFilter: %v", status)
			}
			w := whatIfIn(state)
			if w == nil || w.Guarded() != tc.guarded {
				t.Fatalf("what-if %v; want one, guarded %v", w, tc.guarded)
			}
			if tc.fits {
				if status := pl.Filter(ctx, state, pod, nodes[0]); !status.IsSuccess() {
					t.Errorf("Filter of %d GPUs on 16 free: %v", tc.requests, status)
				}
				return
			}
			cancelled, stop := context.WithCancel(ctx)
			stop()
			status := pl.Filter(cancelled, state, pod, nodes[0])
			if status.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(strings.Join(status.Reasons(), "; "), cannotAllocate) {
				t.Errorf("Filter of %d GPUs on 16: %v; want UnschedulableAndUnresolvable %q, from the count", tc.requests, status, cannotAllocate)
			}
		})
	}
}
