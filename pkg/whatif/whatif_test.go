package whatif

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/gangpreempt"
)

func gpu(name string) structured.DeviceID {
	return structured.MakeDeviceID("gpu.example.com", "node-0", name)
}

// A victim put back makes a member's Filter fail only when the member chose
// one of the devices the victim gives up; taking it out again undoes that,
// and each clone of the cycle state puts back victims of its own.
func TestVictimPutBackFailsTheMemberThatChoseItsDevices(t *testing.T) {
	pod := func(uid string) *v1.Pod { return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}} }
	w := &WhatIf{}
	w.InDryRun(gangpreempt.Found(gangpreempt.Devices{FreedBy: map[types.UID]sets.Set[structured.DeviceID]{
		"holds-a": sets.New(gpu("a")),
		"holds-c": sets.New(gpu("c")),
	}}), nil)
	w.chosen.Insert(gpu("a"), gpu("b"))
	if !w.reinstate(pod("holds-c")) || w.ReinstatedConflict() {
		t.Errorf("a victim whose device no member chose must be spared")
	}
	if w.reinstate(pod("no-victim")) {
		t.Errorf("a pod that gave up no device was taken for a victim")
	}
	clone := w.Clone()
	if !w.reinstate(pod("holds-a")) {
		t.Fatal("a victim was not put back")
	}
	if !w.ReinstatedConflict() {
		t.Errorf("a victim holding the member's chosen device: no conflict")
	}
	if clone.ReinstatedConflict() {
		t.Errorf("a clone saw a victim put back after it was made")
	}
	if !w.unreinstate(pod("holds-a")) || w.ReinstatedConflict() {
		t.Errorf("taking the victim out again must undo the conflict")
	}
	// Partitions of one GPU draw on its counter set: the member chose b,
	// a victim put back holds c of the same GPU.
	sameGPU := gangpreempt.CounterSet{Driver: "gpu.example.com", Pool: "node-0", Name: "gpu-0"}
	w.dryRun.Counters = map[structured.DeviceID]sets.Set[gangpreempt.CounterSet]{gpu("b"): sets.New(sameGPU), gpu("c"): sets.New(sameGPU)}
	if !w.reinstate(pod("holds-c")) || !w.ReinstatedConflict() {
		t.Errorf("a victim on the counter set of the member's device must stay a victim")
	}
	outside := &WhatIf{}
	if outside.reinstate(pod("holds-a")) || outside.ReinstatedConflict() {
		t.Errorf("outside a pod-group preemption nothing is put back")
	}
}
