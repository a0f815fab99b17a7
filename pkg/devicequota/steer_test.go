package devicequota_test

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/devicequota"
)

// partition is a device consuming memory of its GPU's counter.
func partition(memory string) *resourceapi.Device {
	return &resourceapi.Device{Name: "p", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
		CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}}}}}
}

// The claim of claim() asks two whole GPUs, a partition or else a NIC.
func TestSteer(t *testing.T) {
	memory := func(gi string) map[string]resource.Quantity {
		return map[string]resource.Quantity{"memory": resource.MustParse(gi)}
	}
	usedHalf := devicequota.Usage{"gpu-partition": {Devices: 1, Counters: memory("40Gi")}}
	for _, tc := range []struct {
		name   string
		quotas []*v1alpha1.DeviceQuota
		used   devicequota.Usage
		// hidden says, per class and device, whether Blocks is true;
		// nil: no steering.
		blocks map[string]map[*resourceapi.Device]bool
		open   []string
		note   string
	}{{
		name:   "no limit on the pod's classes",
		quotas: []*v1alpha1.DeviceQuota{quota("q", v1alpha1.DeviceClassLimit{DeviceClassName: "fpga", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](0)}})},
	}, {
		name:   "the partition class has no device left: the NIC is the way",
		quotas: []*v1alpha1.DeviceQuota{quota("q", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](1)}})},
		used:   usedHalf,
		blocks: map[string]map[*resourceapi.Device]bool{"gpu-partition": {partition("40Gi"): true, {Name: "any"}: true}},
		open:   []string{"gpu", "nic"},
		note:   "(DeviceQuota team/q: class gpu-partition, devices: limit 1, used 1)",
	}, {
		name: "a counter limit hides only the partitions over what it leaves",
		quotas: []*v1alpha1.DeviceQuota{
			quota("big", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{Counters: memory("160Gi")}}),
			quota("small", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{Counters: memory("80Gi")}}),
		},
		used:   usedHalf,
		blocks: map[string]map[*resourceapi.Device]bool{"gpu-partition": {partition("40Gi"): false, partition("80Gi"): true, {Name: "none"}: false}},
		open:   []string{"gpu", "nic"},
		note:   "(DeviceQuota team/small: class gpu-partition, counter memory: limit 80Gi, used 40Gi)",
	}, {
		name:   "the whole GPUs, asked without alternative, cannot fit: left to the check",
		quotas: []*v1alpha1.DeviceQuota{quota("q", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](3)}})},
		used:   devicequota.Usage{"gpu": {Devices: 2}},
	}, {
		name:   "one GPU left, two asked: left to the check too",
		quotas: []*v1alpha1.DeviceQuota{quota("q", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](1)}})},
	}, {
		name: "every alternative of the partition request blocked: left to the check",
		quotas: []*v1alpha1.DeviceQuota{quota("q",
			v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](0)}},
			v1alpha1.DeviceClassLimit{DeviceClassName: "nic", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](0)}})},
	}, {
		name: "the partitions' memory spent and no NIC left: left to the check, which says what the pod needs",
		quotas: []*v1alpha1.DeviceQuota{quota("q",
			v1alpha1.DeviceClassLimit{DeviceClassName: "gpu-partition", DeviceAmounts: v1alpha1.DeviceAmounts{Counters: memory("40Gi")}},
			v1alpha1.DeviceClassLimit{DeviceClassName: "nic", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](0)}})},
		used: usedHalf,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			used := tc.used
			if used == nil {
				used = devicequota.Usage{}
			}
			steering, ok := devicequota.Steer(tc.quotas, func() devicequota.Usage { return used }, []*resourceapi.ResourceClaim{claim()})
			if ok != (tc.blocks != nil) {
				t.Fatalf("steering: %v, want %v", ok, tc.blocks != nil)
			}
			if !ok {
				return
			}
			for class, devices := range tc.blocks {
				for device, want := range devices {
					if got := steering.Blocks(class, device); got != want {
						t.Errorf("Blocks(%s, %s): %v, want %v", class, device.Name, got, want)
					}
				}
			}
			// A device only one class accepts is hidden where that class
			// blocks it; claim()'s admin-access request names gpu, whose
			// devices stay in view.
			for _, class := range []string{"gpu", "gpu-partition", "nic"} {
				want := class != "gpu"
				for _, open := range tc.open {
					want = want && open != class
				}
				want = want && steering.Blocks(class, &resourceapi.Device{Name: "any"})
				if got := steering.Hides(&resourceapi.Device{Name: "any"}, func(c string) bool { return c == class }); got != want {
					t.Errorf("a device only class %s accepts: hidden %v, want %v", class, got, want)
				}
			}
			// One that an open class accepts too is never hidden.
			if steering.Hides(partition("80Gi"), func(string) bool { return true }) {
				t.Error("a device every class accepts, open ones too, was hidden")
			}
			if note := steering.Note(); !strings.HasSuffix(note, tc.note) {
				t.Errorf("note %q, want it to end in %q", note, tc.note)
			}
		})
	}
}

// Admin access asks nothing of a quota: a claim of admin access only is
// never steered.
func TestSteerIgnoresAdminAccess(t *testing.T) {
	admin := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
		{Name: "monitor", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeAll, AdminAccess: ptr.To(true)}},
	}}}}
	q := quota("q", v1alpha1.DeviceClassLimit{DeviceClassName: "gpu", DeviceAmounts: v1alpha1.DeviceAmounts{Devices: ptr.To[int64](0)}})
	if _, ok := devicequota.Steer([]*v1alpha1.DeviceQuota{q}, func() devicequota.Usage { return devicequota.Usage{} }, []*resourceapi.ResourceClaim{admin}); ok {
		t.Error("a claim of admin access only was steered")
	}
}
