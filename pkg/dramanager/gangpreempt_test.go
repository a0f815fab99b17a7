package dramanager

import (
	"testing"

	"github.com/drascope/drascope/pkg/gangpreempt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

func gpu(name string) structured.DeviceID {
	return structured.MakeDeviceID("gpu.example.com", "node-0", name)
}

// In a pod-group preemption's dry run, the in-use set handed to upstream's
// allocator loses the victims' devices, those of claims about to be
// released and those no claim holds, except one an earlier member already
// put in flight: two members must not get the same device.
func TestVictimsDevicesLeaveTheInUseSetUnlessInFlight(t *testing.T) {
	inner := &innerTracker{}
	m := New(&innerManager{claims: inner}, nil, nil, nil)
	member := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "member-0", UID: "member-0"}}
	member.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-0", Device: "b"},
	}}}
	if err := m.claims.SignalClaimPendingAllocation(member.UID, member); err != nil {
		t.Fatal(err)
	}
	all := func() sets.Set[structured.DeviceID] {
		return sets.New(gpu("a"), gpu("b"), gpu("c"), gpu("d"), gpu("e"))
	}
	inUse := func() sets.Set[structured.DeviceID] {
		state := structured.AllocatedState{AllocatedDevices: all()}
		m.claims.addWithheld(state, false)
		return state.AllocatedDevices
	}
	if got := inUse(); !got.Equal(all()) {
		t.Errorf("outside a dry run: in use %v, want all five", got.UnsortedList())
	}
	m.claims.freeing.Store(gangpreempt.Found(gangpreempt.Devices{
		Freed:    sets.New(gpu("a"), gpu("b")),
		Released: sets.New(gpu("c")),
		Held:     sets.New(gpu("a"), gpu("b"), gpu("c"), gpu("d")),
	}))
	if got, want := inUse(), sets.New(gpu("b"), gpu("d")); !got.Equal(want) {
		t.Errorf("victims hold a and b, c is being released, no claim holds e, a member has b in flight: in use %v, want %v", got.UnsortedList(), want.UnsortedList())
	}
	m.claims.freeing.Store(nil)
	if got := inUse(); !got.Equal(all()) {
		t.Errorf("after the member's PreFilter: in use %v, want all five again", got.UnsortedList())
	}
}
