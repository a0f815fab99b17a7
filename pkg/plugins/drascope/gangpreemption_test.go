package drascope

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
)

func gpu(name string) structured.DeviceID {
	return structured.MakeDeviceID("gpu.example.com", "node-0", name)
}

// In a pod-group preemption's dry run, the victims' devices leave the
// in-use set handed to upstream's allocator, except one an earlier member
// already put in flight: two members must not get the same device.
func TestVictimsDevicesLeaveTheInUseSetUnlessInFlight(t *testing.T) {
	inner := &innerTracker{}
	m := newDRAManager(&innerManager{claims: inner}, nil, nil, nil)
	member := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "member-0", UID: "member-0"}}
	member.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-0", Device: "b"},
	}}}
	if err := m.claims.SignalClaimPendingAllocation(member.UID, member); err != nil {
		t.Fatal(err)
	}
	inUse := func() sets.Set[structured.DeviceID] {
		state := structured.AllocatedState{AllocatedDevices: sets.New(gpu("a"), gpu("b"), gpu("c"), gpu("d"))}
		m.claims.addWithheld(state, false)
		return state.AllocatedDevices
	}
	if got, want := inUse(), sets.New(gpu("a"), gpu("b"), gpu("c"), gpu("d")); !got.Equal(want) {
		t.Errorf("outside a dry run: in use %v, want %v", got.UnsortedList(), want.UnsortedList())
	}
	freed := sets.New(gpu("a"), gpu("b"), gpu("c"))
	m.claims.freeing.Store(&freed)
	if got, want := inUse(), sets.New(gpu("b"), gpu("d")); !got.Equal(want) {
		t.Errorf("victims hold a, b, c, a member has b in flight: in use %v, want %v", got.UnsortedList(), want.UnsortedList())
	}
	m.claims.freeing.Store(nil)
	if got := inUse(); got.Len() != 4 {
		t.Errorf("after the member's PreFilter: in use %v, want all four again", got.UnsortedList())
	}
}

// A victim put back makes a member's Filter fail only when the member chose
// one of the devices the victim gives up; taking it out again undoes that,
// and each clone of the cycle state puts back victims of its own.
func TestVictimPutBackFailsTheMemberThatChoseItsDevices(t *testing.T) {
	pod := func(uid string) *v1.Pod { return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}} }
	w := &whatIf{
		dryRun: &podGroupPreemption{freedBy: map[types.UID]sets.Set[structured.DeviceID]{
			"holds-a": sets.New(gpu("a")),
			"holds-c": sets.New(gpu("c")),
		}},
		chosen:     sets.New(gpu("a"), gpu("b")),
		reinstated: sets.New[types.UID](),
	}
	if !w.reinstate(pod("holds-c")) || w.reinstatedConflict() != nil {
		t.Errorf("a victim whose device no member chose must be spared")
	}
	if w.reinstate(pod("no-victim")) {
		t.Errorf("a pod that gave up no device was taken for a victim")
	}
	clone := w.Clone().(*whatIf)
	if !w.reinstate(pod("holds-a")) {
		t.Fatal("a victim was not put back")
	}
	if status := w.reinstatedConflict(); status.Code() != fwk.Unschedulable {
		t.Errorf("a victim holding the member's chosen device: got %v, want Unschedulable", status)
	}
	if clone.reinstatedConflict() != nil {
		t.Errorf("a clone saw a victim put back after it was made")
	}
	if !w.unreinstate(pod("holds-a")) || w.reinstatedConflict() != nil {
		t.Errorf("taking the victim out again must undo the conflict")
	}
	outside := &whatIf{}
	if outside.reinstate(pod("holds-a")) || outside.reinstatedConflict() != nil {
		t.Errorf("outside a pod-group preemption nothing is put back")
	}
}
