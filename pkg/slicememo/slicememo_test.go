package slicememo

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// A value is computed once per slice object, a new object (an update) gets
// its own, and slices no longer passed are dropped once they outnumber those
// in use: a cluster whose slices are replaced does not grow the memo.
func TestMemoComputesOncePerSliceAndForgetsOldOnes(t *testing.T) {
	var m Memo[int]
	computed := 0
	compute := func(s *resourceapi.ResourceSlice) int { computed++; return len(s.Spec.Devices) }
	kept := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: make([]resourceapi.Device, 3)}}
	for pass := range 100 {
		replaced := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: make([]resourceapi.Device, pass)}}
		m.Begin()
		if got := m.Of(kept, compute); got != 3 {
			t.Fatalf("pass %d: kept slice = %d, want 3", pass, got)
		}
		if got := m.Of(replaced, compute); got != pass {
			t.Fatalf("pass %d: new slice = %d, want %d", pass, got, pass)
		}
		m.End()
	}
	if computed != 101 {
		t.Errorf("computed %d times, want 101: once for the kept slice, once per new one", computed)
	}
	if n := m.Len(); n > 20 {
		t.Errorf("%d slices remembered after 100 replacements, want a handful", n)
	}
	var none *Memo[int]
	none.Begin()
	if got := none.Of(kept, compute); got != 3 {
		t.Errorf("nil memo = %d, want 3", got)
	}
	none.End()
}
