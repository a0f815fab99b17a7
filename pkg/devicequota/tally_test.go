package devicequota_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/devicequota"
)

// A claim is counted once per allocation object: summed again, it costs
// no device lookup; a new allocation of it is counted afresh, and a claim
// gone from the namespace no longer counts.
func TestTallyCountsEachAllocationOnce(t *testing.T) {
	lookups := 0
	counting := func(id structured.DeviceID) *resourceapi.Device {
		lookups++
		return lookup(id)
	}
	train := func(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		c := claim()
		c.UID = types.UID(uid)
		c.Status.Allocation = allocation(results...)
		return c
	}
	a, b := train("a", result("gpus", "gpu-0")), train("b", result("part/half", "half-0"))
	var tally devicequota.Tally
	others, selected := tally.Sum("team", []*resourceapi.ResourceClaim{a, b}, counting, 0, func(c *resourceapi.ResourceClaim) bool { return c.UID == "b" })
	if others["gpu"].Devices != 1 || selected["gpu-partition"].Devices != 1 || others["gpu-partition"] != nil {
		t.Fatalf("split: others %v, selected %v", others, selected)
	}
	if lookups != 2 {
		t.Fatalf("%d device lookups for two results, want 2", lookups)
	}
	others, _ = tally.Sum("team", []*resourceapi.ResourceClaim{a, b}, counting, 0, nil)
	if lookups != 2 || others["gpu"].Devices != 1 || others["gpu-partition"].Devices != 1 {
		t.Errorf("summed again: %d lookups (want none more), usage %v", lookups, others)
	}
	reallocated := train("a", result("gpus", "gpu-0"), result("gpus", "gpu-1"))
	others, _ = tally.Sum("team", []*resourceapi.ResourceClaim{reallocated}, counting, 0, nil)
	if lookups != 4 || others["gpu"].Devices != 2 || others["gpu-partition"] != nil {
		t.Errorf("after a new allocation of a and b gone: %d lookups (want 4), usage %v", lookups, others)
	}
	// A slice changed: every usage is counted again.
	if _, _ = tally.Sum("team", []*resourceapi.ResourceClaim{reallocated}, counting, 1, nil); lookups != 6 {
		t.Errorf("after a slice change: %d lookups, want 6", lookups)
	}
	// A device not found is not remembered as counting nothing.
	gone := func(structured.DeviceID) *resourceapi.Device { lookups++; return nil }
	b2 := train("b", result("part/half", "half-0"))
	tally.Sum("team", []*resourceapi.ResourceClaim{b2}, gone, 1, nil)
	if others, _ = tally.Sum("team", []*resourceapi.ResourceClaim{b2}, counting, 1, nil); !quantityIs(others["gpu-partition"].Counters["memory"], "40Gi") {
		t.Errorf("a half first counted while its slice was missing: usage %v, want its 40Gi once the slice is back", others["gpu-partition"])
	}
	// The sums never share what the tally keeps.
	others["gpu-partition"].Devices = 100
	if again, _ := tally.Sum("team", []*resourceapi.ResourceClaim{b2}, counting, 1, nil); again["gpu-partition"].Devices != 1 {
		t.Errorf("a sum changed by its caller changed the tally: %v", again)
	}
}
