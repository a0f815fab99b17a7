// Package dracases generates random DRA clusters and claims for the
// differential tests that check drascope's shortcuts against upstream's
// allocator (pkg/nodeprune, pkg/dryrun): node-local and network-attached
// pools (all nodes, a node selector, per-device node selection),
// partitionable devices with shared counters, devices that allow multiple
// allocations with consumable capacity, taints and tolerations, withheld
// (Unhealthy) devices, admin access, prioritized lists, allocation mode
// All, classes that name only a driver and classes that select on
// attributes. Only tests import it.
package dracases

import (
	"fmt"
	"math/rand/v2"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/deviceclass"
)

// The cases' drivers.
const (
	GPUDriver = "gpu.example.com"
	NICDriver = "nic.example.com"
)

// FeatureSets choose among upstream's allocators, as the scheduler's gates
// do: everything on (the experimental allocator), 1.37's default gates,
// and the GA features only (the stable allocator). A request a set does not
// support is refused by its allocator; every case runs under each.
var FeatureSets = map[string]structured.Features{
	"all": {
		AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true,
		ConsumableCapacity: true, DeviceBindingAndStatus: true, ListTypeAttributes: true,
	},
	"defaults": dynamicresources.AllocatorFeatures(feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)),
	"ga":       {},
}

// ClassList is a DeviceClassLister over a map.
type ClassList = deviceclass.List

func classWith(name string, expressions ...string) *resourceapi.DeviceClass {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, e := range expressions {
		class.Spec.Selectors = append(class.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return class
}

// Classes are the cases' device classes.
var Classes = ClassList{
	"gpu":       classWith("gpu", `device.driver == "gpu.example.com"`),
	"nic":       classWith("nic", `device.driver == "nic.example.com"`),
	"a100":      classWith("a100", `device.driver == "gpu.example.com"`, `device.attributes["gpu.example.com"].?model.orValue("") == "a100"`),
	"any-a100":  classWith("any-a100", `device.attributes["gpu.example.com"].?model.orValue("") == "a100"`),
	"anything":  classWith("anything"),
	"shareable": classWith("shareable", `device.driver == "gpu.example.com" && device.allowMultipleAllocations == true`),
	"either":    classWith("either", `device.driver == "gpu.example.com" || device.driver == "nic.example.com"`),
}

var classNames = []string{"gpu", "nic", "a100", "any-a100", "anything", "shareable", "either"}

// Case is one random cluster and pod: nodes, the slices, the devices in
// use (withheld ones included) and those withheld as Unhealthy, and the
// pod's claims.
type Case struct {
	Nodes           []*v1.Node
	Slices          []*resourceapi.ResourceSlice
	InUse, Withheld sets.Set[structured.DeviceID]
	Claims          []*resourceapi.ResourceClaim
}

func pick[T any](r *rand.Rand, from ...T) T { return from[r.IntN(len(from))] }

// New returns the case of a seed; the same seed gives the same case.
func New(seed uint64) Case {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var c Case
	for i := range 1 + r.IntN(6) {
		c.Nodes = append(c.Nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("node-%d", i),
			Labels: map[string]string{"zone": pick(r, "a", "b"), "rack": pick(r, "r0", "r1")},
		}})
	}
	taint := func() []resourceapi.DeviceTaint {
		if r.IntN(8) != 0 {
			return nil
		}
		return []resourceapi.DeviceTaint{{Key: "maintenance", Effect: pick(r, resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute)}}
	}
	zoneSelector := func() *v1.NodeSelector {
		return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{
			Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{pick(r, "a", "b")},
		}}}}}
	}
	var devices []structured.DeviceID
	add := func(slice *resourceapi.ResourceSlice) {
		c.Slices = append(c.Slices, slice)
		for _, d := range slice.Spec.Devices {
			devices = append(devices, structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name))
		}
	}
	pool := func(name string, slices int) resourceapi.ResourcePool {
		return resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: int64(slices)}
	}
	for _, node := range c.Nodes {
		if r.IntN(5) == 0 {
			continue // a node without devices
		}
		name := node.Name
		switch r.IntN(3) {
		case 0: // whole GPUs
			slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
				Driver: GPUDriver, Pool: pool(name, 1), NodeName: ptr.To(name)}}
			for j := range 1 + r.IntN(4) {
				slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{
					Name:       fmt.Sprintf("gpu-%d", j),
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To(pick(r, "a100", "h100"))}},
					Taints:     taint(),
				})
			}
			add(slice)
		case 1: // a partitionable GPU: whole, or two halves, of 80Gi
			spec := pool(name, 2)
			add(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-counters"}, Spec: resourceapi.ResourceSliceSpec{
				Driver: GPUDriver, Pool: spec, NodeName: ptr.To(name),
				SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}}},
			}})
			partition := func(device, memory string) resourceapi.Device {
				return resourceapi.Device{
					Name:       device,
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("a100")}},
					ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
						CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}},
					}},
					Taints: taint(),
				}
			}
			add(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-partitions"}, Spec: resourceapi.ResourceSliceSpec{
				Driver: GPUDriver, Pool: spec, NodeName: ptr.To(name),
				Devices: []resourceapi.Device{partition("whole", "80Gi"), partition("half-0", "40Gi"), partition("half-1", "40Gi")},
			}})
		case 2: // a GPU shared by several claims, with consumable memory
			add(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-shared"}, Spec: resourceapi.ResourceSliceSpec{
				Driver: GPUDriver, Pool: pool(name, 1), NodeName: ptr.To(name),
				Devices: []resourceapi.Device{{
					Name:                     "shared-0",
					AllowMultipleAllocations: ptr.To(true),
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {
						Value:         resource.MustParse("80Gi"),
						RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("10Gi"))},
					}},
					Taints: taint(),
				}},
			}})
		}
		if r.IntN(3) == 0 {
			add(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-nics"}, Spec: resourceapi.ResourceSliceSpec{
				Driver: NICDriver, Pool: pool(name+"-nics", 1), NodeName: ptr.To(name),
				Devices: []resourceapi.Device{{Name: "nic-0", Taints: taint()}, {Name: "nic-1"}},
			}})
		}
	}
	// Network-attached pools.
	for i := range r.IntN(3) {
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fabric-%d", i)}, Spec: resourceapi.ResourceSliceSpec{
			Driver: pick(r, NICDriver, GPUDriver), Pool: pool(fmt.Sprintf("fabric-%d", i), 1)}}
		perDevice := false
		switch r.IntN(3) {
		case 0:
			slice.Spec.AllNodes = ptr.To(true)
		case 1:
			slice.Spec.NodeSelector = zoneSelector()
		case 2:
			slice.Spec.PerDeviceNodeSelection = ptr.To(true)
			perDevice = true
		}
		for j := range 1 + r.IntN(3) {
			device := resourceapi.Device{Name: fmt.Sprintf("link-%d", j), Taints: taint(),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To(pick(r, "a100", "x"))}}}
			if perDevice {
				switch r.IntN(3) {
				case 0:
					device.NodeName = ptr.To(c.Nodes[r.IntN(len(c.Nodes))].Name)
				case 1:
					device.AllNodes = ptr.To(true)
				case 2:
					device.NodeSelector = zoneSelector()
				}
			}
			slice.Spec.Devices = append(slice.Spec.Devices, device)
		}
		add(slice)
	}

	// In use: a random share of the devices, from almost none to almost
	// all; some withheld as Unhealthy, which the allocator sees in use too.
	c.InUse = sets.New[structured.DeviceID]()
	c.Withheld = sets.New[structured.DeviceID]()
	busy := pick(r, 0.1, 0.6, 0.9, 1.0)
	for _, id := range devices {
		if r.Float64() < busy {
			c.InUse.Insert(id)
		}
		if r.IntN(10) == 0 {
			c.InUse.Insert(id)
			c.Withheld.Insert(id)
		}
	}

	// The pod's claims.
	request := func(name string) resourceapi.DeviceRequest {
		exact := &resourceapi.ExactDeviceRequest{
			DeviceClassName: pick(r, classNames...),
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           int64(1 + r.IntN(2)),
		}
		if r.IntN(10) == 0 {
			exact.AllocationMode, exact.Count = resourceapi.DeviceAllocationModeAll, 0
		}
		if r.IntN(10) == 0 {
			exact.AdminAccess = ptr.To(true)
		}
		if r.IntN(3) == 0 {
			exact.Tolerations = []resourceapi.DeviceToleration{{Key: "maintenance", Operator: resourceapi.DeviceTolerationOpExists}}
		}
		if exact.DeviceClassName == "shareable" && r.IntN(2) == 0 {
			exact.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(pick(r, "10Gi", "60Gi"))}}
		}
		if r.IntN(5) != 0 {
			return resourceapi.DeviceRequest{Name: name, Exactly: exact}
		}
		first := resourceapi.DeviceSubRequest{Name: "first", DeviceClassName: exact.DeviceClassName, AllocationMode: exact.AllocationMode, Count: exact.Count, Tolerations: exact.Tolerations}
		second := resourceapi.DeviceSubRequest{Name: "second", DeviceClassName: pick(r, classNames...), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
		return resourceapi.DeviceRequest{Name: name, FirstAvailable: []resourceapi.DeviceSubRequest{first, second}}
	}
	for i := range 1 + r.IntN(2) {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("claim-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		for j := range 1 + r.IntN(2) {
			claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, request(fmt.Sprintf("req-%d", j)))
		}
		c.Claims = append(c.Claims, claim)
	}

	// Now and then a pool with a slice on each of two nodes, which nothing
	// forbids: an allocator on one of them reads the other's slice to know
	// the pool complete. Drawn last, so that every draw above is as it was.
	if len(c.Nodes) > 1 && r.IntN(4) == 0 {
		first := r.IntN(len(c.Nodes))
		second := (first + 1 + r.IntN(len(c.Nodes)-1)) % len(c.Nodes)
		for i, node := range []int{first, second} {
			name := c.Nodes[node].Name
			slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("split-%d", i)}, Spec: resourceapi.ResourceSliceSpec{
				Driver: GPUDriver, Pool: pool("split", 2), NodeName: ptr.To(name),
				Devices: []resourceapi.Device{{Name: fmt.Sprintf("gpu-%d", i),
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To(pick(r, "a100", "h100"))}}}},
			}}
			add(slice)
			if r.Float64() < busy {
				c.InUse.Insert(structured.MakeDeviceID(GPUDriver, "split", slice.Spec.Devices[0].Name))
			}
		}
	}
	return c
}

// CEL is the cache the cases' allocators share.
var CEL = cel.NewCache(50, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

// DescribeClaims says what the claims request, for a failure message.
func DescribeClaims(claims []*resourceapi.ResourceClaim) string {
	out := ""
	for _, claim := range claims {
		for _, r := range claim.Spec.Devices.Requests {
			if r.Exactly != nil {
				out += fmt.Sprintf("[%s/%s: class %s, %s %d, admin %v] ", claim.Name, r.Name, r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count, ptr.Deref(r.Exactly.AdminAccess, false))
			} else {
				out += fmt.Sprintf("[%s/%s: first of %s, %s] ", claim.Name, r.Name, r.FirstAvailable[0].DeviceClassName, r.FirstAvailable[1].DeviceClassName)
			}
		}
	}
	return out
}
