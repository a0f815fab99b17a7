package drascope

import (
	"slices"
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

// In a pod-group preemption's dry run, the in-use set handed to upstream's
// allocator loses the victims' devices, those of claims about to be
// released and those no claim holds, except one an earlier member already
// put in flight: two members must not get the same device.
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
	m.claims.freeing.Store(&podGroupPreemption{
		freed:    sets.New(gpu("a"), gpu("b")),
		released: sets.New(gpu("c")),
		held:     sets.New(gpu("a"), gpu("b"), gpu("c"), gpu("d")),
	})
	if got, want := inUse(), sets.New(gpu("b"), gpu("d")); !got.Equal(want) {
		t.Errorf("victims hold a and b, c is being released, no claim holds e, a member has b in flight: in use %v, want %v", got.UnsortedList(), want.UnsortedList())
	}
	m.claims.freeing.Store(nil)
	if got := inUse(); !got.Equal(all()) {
		t.Errorf("after the member's PreFilter: in use %v, want all five again", got.UnsortedList())
	}
}

// The victims' devices are listed after the others, so that a member takes
// free devices first; slices without a victim's device are not copied.
func TestVictimsDevicesAreListedLast(t *testing.T) {
	slice := func(name string, devices ...string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.example.com", Pool: resourceapi.ResourcePool{Name: "node-0"}}}
		for _, d := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d})
		}
		return s
	}
	untouched := slice("free", "x", "y")
	listed := []*resourceapi.ResourceSlice{slice("mixed", "a", "b", "c", "d"), untouched}
	got := victimsLast(listed, &podGroupPreemption{freed: sets.New(gpu("a"), gpu("c"))})
	var order []string
	for _, d := range got[0].Spec.Devices {
		order = append(order, d.Name)
	}
	if want := []string{"b", "d", "a", "c"}; !slices.Equal(order, want) {
		t.Errorf("devices listed %v, want %v", order, want)
	}
	if listed[0].Spec.Devices[0].Name != "a" {
		t.Errorf("the informer's slice was changed")
	}
	if got[1] != untouched {
		t.Errorf("a slice without victims' devices was copied")
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
	// Partitions of one GPU draw on its counter set: the member chose b,
	// a victim put back holds c of the same GPU.
	sameGPU := counterSet{driver: "gpu.example.com", pool: "node-0", name: "gpu-0"}
	w.dryRun.counters = map[structured.DeviceID]sets.Set[counterSet]{gpu("b"): sets.New(sameGPU), gpu("c"): sets.New(sameGPU)}
	if !w.reinstate(pod("holds-c")) || w.reinstatedConflict() == nil {
		t.Errorf("a victim on the counter set of the member's device must stay a victim")
	}
	outside := &whatIf{}
	if outside.reinstate(pod("holds-a")) || outside.reinstatedConflict() != nil {
		t.Errorf("outside a pod-group preemption nothing is put back")
	}
}
