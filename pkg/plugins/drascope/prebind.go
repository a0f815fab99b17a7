package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreBind marks the pod's in-flight allocations as being written (what
// Reserve noted under signalledKey: reserve.go says why), then runs
// upstream's, which writes them. A gang member that got this far needs its
// plan no more.
func (pl *DRAScope) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	if s, ok := fromCycle[signalled](state, signalledKey); ok && pl.manager != nil {
		pl.manager.Claims().StartWriting(s.uids)
	}
	pl.gangPlans.Forget([]*v1.Pod{pod})
	return pl.DynamicResources.PreBind(ctx, state, pod, nodeName)
}
