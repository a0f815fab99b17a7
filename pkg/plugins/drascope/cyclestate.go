package drascope

import fwk "k8s.io/kube-scheduler/framework"

// fromCycle returns what a cycle's earlier extension point wrote under key,
// as T; false when the cycle has no state (a caller outside a cycle, such
// as a test or the preemption dry run), nothing under key, or something
// else.
func fromCycle[T fwk.StateData](state fwk.CycleState, key fwk.StateKey) (T, bool) {
	var zero T
	if state == nil {
		return zero, false
	}
	data, err := state.Read(key)
	if err != nil {
		return zero, false
	}
	t, ok := data.(T)
	return t, ok
}
