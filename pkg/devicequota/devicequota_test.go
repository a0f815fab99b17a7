package devicequota_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/devicequota"
)

// A claim of three requests: two whole GPUs, a half of a partitionable
// one or else a NIC, and admin access to a GPU.
func claim() *resourceapi.ResourceClaim {
	exact := func(name, class string, count int64) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	}
	monitor := exact("monitor", "gpu", 1)
	monitor.Exactly.AdminAccess = ptr.To(true)
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "train"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			exact("gpus", "gpu", 2),
			{Name: "part", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "half", DeviceClassName: "gpu-partition", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				{Name: "nic", DeviceClassName: "nic", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}},
			monitor,
		}}},
	}
}

func allocation(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocationResult {
	return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
}

func result(request, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "gpu.example.com", Pool: "node-0", Device: device}
}

// halves consume 40Gi of their GPU's memory counter.
func lookup(id structured.DeviceID) *resourceapi.Device {
	if id.Device.String() != "half-0" && id.Device.String() != "half-1" {
		return &resourceapi.Device{Name: id.Device.String()}
	}
	return &resourceapi.Device{Name: id.Device.String(), ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
		CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("40Gi")}},
	}}}
}

func TestOfAllocationCountsByTheChosenClass(t *testing.T) {
	usage := devicequota.OfAllocation(claim(), allocation(
		result("gpus", "gpu-0"), result("gpus", "gpu-1"), result("part/half", "half-0"),
		func() resourceapi.DeviceRequestAllocationResult {
			r := result("monitor", "gpu-2")
			r.AdminAccess = ptr.To(true)
			return r
		}(),
	), lookup)
	if got := usage["gpu"]; got == nil || got.Devices != 2 || len(got.Counters) != 0 {
		t.Errorf("gpu: %+v, want 2 devices and no counters (admin access counts nothing)", got)
	}
	if got := usage["gpu-partition"]; got == nil || got.Devices != 1 || !quantityIs(got.Counters["memory"], "40Gi") {
		t.Errorf("gpu-partition: %+v, want 1 device consuming 40Gi of memory", got)
	}
	if usage["nic"] != nil {
		t.Errorf("nic: %+v, want nothing: the alternative was not chosen", usage["nic"])
	}
	// Two shares of one partition in one claim: one device, its counters
	// once.
	shared := devicequota.OfAllocation(claim(), allocation(result("part/half", "half-0"), result("part/half", "half-0")), lookup)
	if got := shared["gpu-partition"]; got == nil || got.Devices != 1 || !quantityIs(got.Counters["memory"], "40Gi") {
		t.Errorf("two shares of half-0: %+v, want 1 device consuming 40Gi", got)
	}
}

func quota(name string, limits ...v1alpha1.DeviceClassLimit) *v1alpha1.DeviceQuota {
	return &v1alpha1.DeviceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Spec: v1alpha1.DeviceQuotaSpec{Limits: limits}}
}

func TestCheck(t *testing.T) {
	devices := func(class string, n int64) v1alpha1.DeviceClassLimit {
		return v1alpha1.DeviceClassLimit{DeviceClassName: class, DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To(n)}}
	}
	memory := v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{
		Counters: map[string]resource.Quantity{"memory": resource.MustParse("80Gi")}}}
	half := func() devicequota.Usage {
		return devicequota.OfAllocation(claim(), allocation(result("part/half", "half-0")), lookup)
	}
	gpus := func(n int) devicequota.Usage {
		var results []resourceapi.DeviceRequestAllocationResult
		for i := range n {
			results = append(results, result("gpus", fmt.Sprintf("gpu-%d", i)))
		}
		return devicequota.OfAllocation(claim(), allocation(results...), lookup)
	}

	// Two 40Gi halves fit an 80Gi limit; a third does not.
	used := devicequota.Usage{}
	for i := range 3 {
		excess, over := devicequota.Check([]*v1alpha1.DeviceQuota{quota("memory", memory)}, used, half())
		if i < 2 && over {
			t.Fatalf("half %d refused: %s", i, excess)
		}
		if i == 2 {
			want := "DeviceQuota team/memory: class gpu-partition, counter memory: limit 80Gi, used 80Gi, this pod needs 40Gi"
			if !over || excess.String() != want {
				t.Errorf("third half: %q (%v), want %q", excess.String(), over, want)
			}
		}
		used.Add(half())
	}

	// Every quota applies: the tighter refuses, named.
	quotas := []*v1alpha1.DeviceQuota{quota("a-wide", devices("gpu", 8)), quota("b-tight", devices("gpu", 2))}
	if excess, over := devicequota.Check(quotas, devicequota.Usage{}, gpus(2)); over {
		t.Errorf("two GPUs refused at a limit of 2: %s", excess)
	}
	if excess, over := devicequota.Check(quotas, gpus(1), gpus(2)); !over || excess.Quota != "team/b-tight" || excess.Used.Value() != 1 || excess.Needed.Value() != 2 {
		t.Errorf("excess %+v (%v), want b-tight with 1 used and 2 needed", excess, over)
	}
	// A limit lowered below what is used refuses more of it, and nothing
	// of another class.
	lowered := []*v1alpha1.DeviceQuota{quota("lowered", devices("gpu", 1))}
	if _, over := devicequota.Check(lowered, gpus(3), gpus(1)); !over {
		t.Error("a GPU allowed over a lowered limit")
	}
	if excess, over := devicequota.Check(lowered, gpus(3), half()); over {
		t.Errorf("a partition refused by a limit on GPUs: %s", excess)
	}
	// No quota: no limit.
	if _, over := devicequota.Check(nil, gpus(100), gpus(100)); over {
		t.Error("refused without a quota")
	}
}

func TestStatusNeverLeavesLessThanZero(t *testing.T) {
	q := quota("q", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{
		Devices: ptr.To[int64](1), Counters: map[string]resource.Quantity{"memory": resource.MustParse("80Gi")}}})
	used := devicequota.Usage{}
	for range 3 {
		used.Add(devicequota.OfAllocation(claim(), allocation(result("part/half", "half-0")), lookup))
	}
	status := devicequota.Status(q, used)
	if len(status.Classes) != 1 {
		t.Fatalf("status %+v, want one class", status)
	}
	c := status.Classes[0]
	if *c.Used.Devices != 3 || *c.Left.Devices != 0 || !quantityIs(c.Used.Counters["memory"], "120Gi") || !quantityIs(c.Left.Counters["memory"], "0") {
		t.Errorf("class %+v, want 3 used, 0 left, 120Gi used, 0 left", c)
	}
}

func quantityIs(q resource.Quantity, want string) bool {
	return q.Cmp(resource.MustParse(want)) == 0
}
