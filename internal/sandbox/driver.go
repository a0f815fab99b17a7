package sandbox

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// The simulated driver's names.
const (
	gpuDriver    = "gpu.example.com"
	fabricDriver = "fabric.example.com"
	fabricPool   = "fabric"

	gpuClass       = "gpu.example.com"
	partitionClass = "gpu-partition.example.com"
	fabricClass    = "fabric.example.com"
)

// deviceClasses select whole GPUs, GPU partitions and fabric devices.
func deviceClasses() []*resourceapi.DeviceClass {
	class := func(name, expression string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: expression},
			}}},
		}
	}
	return []*resourceapi.DeviceClass{
		class(gpuClass, `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].kind == "gpu"`),
		class(partitionClass, `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].kind == "partition"`),
		class(fabricClass, `device.driver == "fabric.example.com"`),
	}
}

// partitionableGPUs is how many partitionable GPUs each node has.
const partitionableGPUs = 2

// nodeResources are one node's devices: gpus whole GPUs, and
// partitionableGPUs partitionable GPUs pgpu-N, each offered whole
// (pgpu-N-whole) and as two halves (pgpu-N-half-0, pgpu-N-half-1) that share
// its memory counters.
//
// The partitions are listed halves first, half 0 of every GPU before half 1,
// as a driver that numbers partitions per profile might list them: upstream's
// first-fit choice then puts two half-GPU pods on two GPUs, and no GPU stays
// whole. The demo's device-choice step shows deviceChoice BestFit packing
// them on one GPU regardless.
func nodeResources(gpus int) *resourceslice.DriverResources {
	kind := func(k string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: ptr.To(k)}}
	}
	var devices []resourceapi.Device
	for i := range gpus {
		devices = append(devices, resourceapi.Device{
			Name:       fmt.Sprintf("gpu-%d", i),
			Attributes: kind("gpu"),
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
		})
	}
	partition := func(gpu int, name, memory string) resourceapi.Device {
		return resourceapi.Device{
			Name:       fmt.Sprintf("pgpu-%d-%s", gpu, name),
			Attributes: kind("partition"),
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: fmt.Sprintf("pgpu-%d", gpu),
				Counters:   map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}},
			}},
		}
	}
	var counters []resourceapi.CounterSet
	for gpu := range partitionableGPUs {
		counters = append(counters, resourceapi.CounterSet{Name: fmt.Sprintf("pgpu-%d", gpu), Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("80Gi")}}})
	}
	for _, half := range []string{"half-0", "half-1"} {
		for gpu := range partitionableGPUs {
			devices = append(devices, partition(gpu, half, "40Gi"))
		}
	}
	for gpu := range partitionableGPUs {
		devices = append(devices, partition(gpu, "whole", "80Gi"))
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		// The pool is named after the node by the caller.
		"": {Slices: []resourceslice.Slice{
			{SharedCounters: counters},
			{Devices: devices},
		}},
	}}
}

// fabricResources are devices reachable from every node.
func fabricResources(devices int) *resourceslice.DriverResources {
	var list []resourceapi.Device
	for i := range devices {
		list = append(list, resourceapi.Device{Name: fmt.Sprintf("link-%d", i)})
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		fabricPool: {AllNodes: true, Slices: []resourceslice.Slice{{Devices: list}}},
	}}
}

// startDriver creates the device classes and publishes every node's
// ResourceSlices through k8s.io/dynamic-resource-allocation/resourceslice,
// as a DRA driver's kubelet plugin does, and the fabric pool as its
// controller would.
func startDriver(ctx context.Context, client kubernetes.Interface, nodes []string, gpus int) error {
	for _, class := range deviceClasses() {
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DeviceClass %s: %w", class.Name, err)
		}
	}
	for _, node := range nodes {
		resources := nodeResources(gpus)
		resources.Pools = map[string]resourceslice.Pool{node: resources.Pools[""]}
		if _, err := resourceslice.StartController(ctx, resourceslice.Options{
			DriverName: gpuDriver,
			KubeClient: client,
			Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
			Resources:  resources,
		}); err != nil {
			return fmt.Errorf("publishing the devices of node %s: %w", node, err)
		}
	}
	if _, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: fabricDriver,
		KubeClient: client,
		Resources:  fabricResources(4),
	}); err != nil {
		return fmt.Errorf("publishing the fabric pool: %w", err)
	}
	return nil
}
