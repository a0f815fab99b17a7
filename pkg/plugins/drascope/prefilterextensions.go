package drascope

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/gangpreempt"
)

// PreFilterExtensions makes DRAScope part of preemption's dry runs and of
// the pass of Filter that counts nominated pods (pkg/whatif).
func (pl *DRAScope) PreFilterExtensions() fwk.PreFilterExtensions {
	if pl.manager == nil {
		return nil
	}
	return pl
}

// RemovePod records a pod a dry run removes from the node: a victim.
func (pl *DRAScope) RemovePod(_ context.Context, state fwk.CycleState, _ *v1.Pod, podInfoToRemove fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	if w := whatIfIn(state); w != nil {
		w.Remove(podInfoToRemove.GetPod())
	}
	return nil
}

// AddPod undoes RemovePod for a reprieved victim, and records any other
// pod as one whose devices come first: a pod nominated to the node, of
// priority at least the pod's.
func (pl *DRAScope) AddPod(_ context.Context, state fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	if w := whatIfIn(state); w != nil {
		w.Add(podInfoToAdd.GetPod())
	}
	return nil
}

// WithPodGroupPreemption marks ctx for a pod-group preemption that is about
// to mutate snapshot (pkg/gangpreempt): call it before upstream's
// PodGroupPostFilter of DefaultPreemption, with the scheduler's snapshot as
// it is before.
func WithPodGroupPreemption(ctx context.Context, snapshot fwk.SharedLister) context.Context {
	nodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return ctx
	}
	before := map[types.UID]*v1.Pod{}
	for _, n := range nodes {
		for _, info := range n.GetPods() {
			if pod := info.GetPod(); len(pod.Spec.ResourceClaims) > 0 {
				before[pod.UID] = pod
			}
		}
	}
	return gangpreempt.NewContext(ctx, gangpreempt.New(before))
}
