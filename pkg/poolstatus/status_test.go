package poolstatus

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/manifests"
	"github.com/drascope/drascope/pkg/drausage"
)

func usage(complete, conflict bool) *drausage.PoolUsage {
	u := drausage.PoolUsage{
		PoolID:         drausage.PoolID{Driver: "gpu.example.com", Pool: "node-1"},
		NodeName:       "node-1",
		Generation:     3,
		ObservedSlices: 2, ExpectedSlices: 2,
		Summary: drausage.Summary{Total: 4, Allocated: 2, Available: 1, Unavailable: 1, PartiallyAllocated: 1},
	}
	if !complete {
		u.ObservedSlices = 1
		u.ValidationErrors = append(u.ValidationErrors, drausage.ValidationError{Kind: drausage.MissingSlices, Message: "pool gpu.example.com/node-1 is incomplete: 1 of 2 slices at generation 3"})
	}
	if conflict {
		u.Conflicts = append(u.Conflicts, drausage.Conflict{Kind: drausage.OverAllocatedDevice, Subject: "gpu-0",
			Message: "device gpu.example.com/node-1/gpu-0 is allocated to 2 claims without admin access",
			Claims:  []drausage.ClaimRef{{Namespace: "secret", Name: "a"}, {Namespace: "secret", Name: "b"}}})
	}
	return &u
}

func TestStatusFor(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)

	first := For(usage(false, false), "Avoid", nil, t0)
	if got := *first.Summary; got != (v1alpha1.PoolSummary{TotalDevices: 4, AllocatedDevices: 2, AvailableDevices: 1, UnavailableDevices: 1, PartiallyAllocatedDevices: 1}) {
		t.Errorf("summary %+v", got)
	}
	if first.ObservedSliceCount != 1 || first.ExpectedSliceCount != 2 || first.ObservedGeneration != 3 {
		t.Errorf("slice counts %d/%d at generation %d", first.ObservedSliceCount, first.ExpectedSliceCount, first.ObservedGeneration)
	}
	complete := meta.FindStatusCondition(first.Conditions, v1alpha1.ConditionComplete)
	valid := meta.FindStatusCondition(first.Conditions, v1alpha1.ConditionValid)
	if complete.Status != metav1.ConditionFalse || complete.Reason != "SlicesMissing" || valid.Status != metav1.ConditionTrue {
		t.Errorf("missing slices: want Complete=False/SlicesMissing and Valid=True, got %+v %+v", complete, valid)
	}

	// The same status a minute later: nothing moves, not even lastUpdateTime.
	same := For(usage(false, false), "Avoid", first, t1)
	if !Equal(first, same) || !same.LastUpdateTime.Equal(first.LastUpdateTime) {
		t.Errorf("an unchanged snapshot changed the status: %+v -> %+v", first, same)
	}

	// A conflict flips Valid (new transition time); Complete keeps its own.
	changed := For(usage(false, true), "Avoid", first, t1)
	if Equal(first, changed) {
		t.Fatal("a new conflict did not change the status")
	}
	valid = meta.FindStatusCondition(changed.Conditions, v1alpha1.ConditionValid)
	complete = meta.FindStatusCondition(changed.Conditions, v1alpha1.ConditionComplete)
	if valid.Status != metav1.ConditionFalse || !valid.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("Valid %+v: want False since %v", valid, t1)
	}
	if !complete.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Complete moved its transition time to %v without changing", complete.LastTransitionTime)
	}
	if len(changed.ValidationErrors) != 2 || !changed.LastUpdateTime.Time.Equal(t1) {
		t.Errorf("validationErrors %q, lastUpdateTime %v", changed.ValidationErrors, changed.LastUpdateTime)
	}
	if got := changed.Conflicts; got == nil || *got != (v1alpha1.AllocationConflicts{OverAllocatedDevices: 1}) {
		t.Errorf("conflicts %+v, want one over-allocated device", got)
	}
	if first.Conflicts != nil {
		t.Errorf("conflicts %+v without any", first.Conflicts)
	}
}

// Conflicts share the 10 messages with the slices' problems, but every one
// is counted: in status.conflicts, and in truncatedErrorCount when left out.
func TestEveryConflictIsCountedInStatus(t *testing.T) {
	u := usage(true, false)
	for i := range 9 {
		u.ValidationErrors = append(u.ValidationErrors, drausage.ValidationError{Kind: drausage.DuplicateDevice, Message: fmt.Sprintf("duplicate %d", i)})
	}
	for i := range 12 {
		u.Conflicts = append(u.Conflicts, drausage.Conflict{Kind: drausage.OverAllocatedDevice, Subject: fmt.Sprint(i), Message: fmt.Sprintf("conflict %d", i)})
	}
	u.Conflicts = append(u.Conflicts, drausage.Conflict{Kind: drausage.OverConsumedCounter, Subject: "gpu-0/memory", Message: "counter"})
	status := For(u, "", nil, time.Now())
	if len(status.ValidationErrors) != drausage.MaxValidationErrors || status.ValidationErrors[9] != "conflict 0" || status.TruncatedErrorCount != 12 {
		t.Errorf("validationErrors %q, %d more: want 9 slice problems, the first conflict, and 12 counted", status.ValidationErrors, status.TruncatedErrorCount)
	}
	if got := *status.Conflicts; got != (v1alpha1.AllocationConflicts{OverAllocatedDevices: 12, OverConsumedCounters: 1}) {
		t.Errorf("conflicts %+v, want 12 devices and 1 counter", got)
	}
	if valid := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionValid); valid.Status != metav1.ConditionFalse || !strings.Contains(valid.Message, "22 problem(s), 12 not listed") {
		t.Errorf("Valid %+v", valid)
	}
}

// status.devices lists every device that is not Available, and no claim.
func TestForListsHeldAndUnavailableDevices(t *testing.T) {
	u := usage(true, false)
	u.Devices = []drausage.DeviceUsage{
		{Name: "gpu-0", State: drausage.DeviceAllocated, Allocations: []drausage.Allocation{{Claim: drausage.ClaimRef{Namespace: "secret", Name: "claim"}}}},
		{Name: "gpu-1", State: drausage.DeviceAvailable},
		{Name: "gpu-2", State: drausage.DeviceUnavailable, Reason: drausage.ReasonTainted, Message: "broken=fan:NoSchedule"},
		{Name: "gpu-3", State: drausage.DevicePartiallyAllocated},
		{Name: "gpu-4", State: drausage.DeviceAvailable, Health: drausage.DeviceHealth{Status: v1.ResourceHealthStatusHealthy, Detail: "reported by pod a/b"}},
		{Name: "gpu-5", State: drausage.DeviceAvailable, Health: drausage.DeviceHealth{Status: v1.ResourceHealthStatusUnhealthy, Detail: "reported by pod a/c"}},
	}
	status := For(u, "Ignore", nil, time.Now())
	if status.DeviceHealthPolicy != "Ignore" {
		t.Errorf("deviceHealthPolicy %q, want the scheduler's, Ignore", status.DeviceHealthPolicy)
	}
	got := status.Devices
	want := []v1alpha1.DeviceStatus{
		{Name: "gpu-0", State: "Allocated"},
		{Name: "gpu-2", State: "Unavailable", Reason: "Tainted", Message: "broken=fan:NoSchedule"},
		{Name: "gpu-3", State: "PartiallyAllocated"},
		// Listed although Available: kubelet reported it Unhealthy (policy Ignore).
		{Name: "gpu-5", State: "Available", Health: "Unhealthy", HealthMessage: "reported by pod a/c"},
	}
	if len(got) != len(want) {
		t.Fatalf("devices %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("device %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A pool with more devices to list than the CRD allows is published with
// the rest counted, Unhealthy and Unavailable ones kept first: a status the
// apiserver refuses would be retried forever.
func TestForTruncatesTheDeviceList(t *testing.T) {
	u := drausage.PoolUsage{PoolID: drausage.PoolID{Driver: "gpu.example.com", Pool: "big"}}
	const allocated, tainted = 100, v1alpha1.MaxDevices
	for i := range allocated + tainted {
		d := drausage.DeviceUsage{Name: fmt.Sprintf("dev-%05d", i), State: drausage.DeviceAllocated}
		if i >= allocated {
			// No message: 8192 such devices fit in MaxDeviceBytes, so the
			// count is what bounds the list here.
			d.State, d.Reason = drausage.DeviceUnavailable, drausage.ReasonTainted
		}
		u.Devices = append(u.Devices, d)
	}
	status := For(&u, "Taint", nil, time.Now())
	if len(status.Devices) != v1alpha1.MaxDevices || status.TruncatedDeviceCount != allocated {
		t.Fatalf("%d devices listed, %d truncated; want %d and %d", len(status.Devices), status.TruncatedDeviceCount, v1alpha1.MaxDevices, allocated)
	}
	for i, d := range status.Devices {
		if d.State != string(drausage.DeviceUnavailable) {
			t.Fatalf("device %d listed is %s %s, want only Unavailable ones kept", i, d.Name, d.State)
		}
		if i > 0 && status.Devices[i-1].Name >= d.Name {
			t.Fatalf("devices not sorted by name at %d: %s, %s", i, status.Devices[i-1].Name, d.Name)
		}
	}
	small := u
	small.Devices = u.Devices[:10]
	if s := For(&small, "Taint", nil, time.Now()); len(s.Devices) != 10 || s.TruncatedDeviceCount != 0 {
		t.Errorf("a small pool: %d listed, %d truncated; want 10 and 0", len(s.Devices), s.TruncatedDeviceCount)
	}
}

// Thousands of Unhealthy devices with long messages are published within
// the byte budget, Unavailable ones first, the rest counted: their full
// list would pass the apiserver's request limit, be refused on every
// write, and freeze the pool's object.
func TestForBoundsTheDeviceListByBytes(t *testing.T) {
	u := drausage.PoolUsage{PoolID: drausage.PoolID{Driver: "gpu.example.com", Pool: "broken"}}
	const allocated, unhealthy = 500, 3000
	long := strings.Repeat("Xid 79: GPU has fallen off the bus <", 28) // escaped in JSON
	for i := range allocated + unhealthy {
		d := drausage.DeviceUsage{Name: fmt.Sprintf("gpu-%05d", i), State: drausage.DeviceAllocated}
		if i >= allocated {
			d.State, d.Reason, d.Message = drausage.DeviceUnavailable, drausage.ReasonUnhealthy, long
			d.Health = drausage.DeviceHealth{Status: "Unhealthy", Detail: long}
		}
		u.Devices = append(u.Devices, d)
	}
	status := For(&u, "Taint", nil, time.Now())
	data, err := json.Marshal(status.Devices)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > MaxDeviceBytes {
		t.Errorf("the device list encodes to %d bytes, want at most %d", len(data), MaxDeviceBytes)
	}
	if n := len(status.Devices) + int(status.TruncatedDeviceCount); n != allocated+unhealthy || status.TruncatedDeviceCount == 0 {
		t.Errorf("%d listed and %d truncated; want them to add up to %d, some truncated", len(status.Devices), status.TruncatedDeviceCount, allocated+unhealthy)
	}
	for _, d := range status.Devices {
		if d.State != string(drausage.DeviceUnavailable) {
			t.Fatalf("%s listed as %s while Unhealthy devices were left out; want those first", d.Name, d.State)
		}
	}
	// The budget is not the limit in the usual case: every device listed.
	few := u
	few.Devices = u.Devices[allocated : allocated+100]
	if s := For(&few, "Taint", nil, time.Now()); len(s.Devices) != 100 || s.TruncatedDeviceCount != 0 {
		t.Errorf("100 Unhealthy devices: %d listed, %d truncated; want 100 and 0", len(s.Devices), s.TruncatedDeviceCount)
	}
}

// MaxDevices is the CRD's maxItems of status.devices.
func TestMaxDevicesMatchesTheCRD(t *testing.T) {
	data, err := manifests.Files.ReadFile("crds/resourcepools.drascope.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	devices := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["devices"]
	if devices.MaxItems == nil || *devices.MaxItems != v1alpha1.MaxDevices {
		t.Errorf("CRD status.devices maxItems %v, want v1alpha1.MaxDevices (%d)", devices.MaxItems, v1alpha1.MaxDevices)
	}
	if _, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["truncatedDeviceCount"]; !ok {
		t.Error("CRD has no status.truncatedDeviceCount")
	}
}
