package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ResourcePool reports the availability of one DRA pool: the devices its
// ResourceSlices publish, and how many of them claims hold. It names no
// claim, so reading it reveals nothing about other namespaces.
type ResourcePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ResourcePoolSpec   `json:"spec"`
	Status ResourcePoolStatus `json:"status,omitempty"`
}

// ResourcePoolSpec identifies the pool. It is immutable.
type ResourcePoolSpec struct {
	// Driver is the DRA driver that publishes the pool.
	Driver string `json:"driver"`
	// PoolName is the pool's name, unique per driver.
	PoolName string `json:"poolName"`
	// NodeName is the node whose local devices the pool holds; empty for
	// pools not tied to one node (network-attached devices).
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// Condition types of a ResourcePool.
const (
	// ConditionComplete is True when every slice of the pool's current
	// generation is present (resourceSliceCount of them).
	ConditionComplete = "Complete"
	// ConditionValid is True when the pool's slices and allocations passed
	// validation: no duplicate devices, no older slices left, and no
	// allocation conflict (see AllocationConflicts).
	ConditionValid = "Valid"
)

// ResourcePoolStatus is the pool's availability as the scheduler sees it,
// including allocations it has made but not yet written.
type ResourcePoolStatus struct {
	// Summary counts the pool's devices by state.
	// +optional
	Summary *PoolSummary `json:"summary,omitempty"`
	// Conditions: Complete and Valid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ValidationErrors holds at most 10 problems found across the pool:
	// the slices' first, then the allocation conflicts'.
	// +optional
	ValidationErrors []string `json:"validationErrors,omitempty"`
	// TruncatedErrorCount counts the problems left out of ValidationErrors.
	// +optional
	TruncatedErrorCount int32 `json:"truncatedErrorCount,omitempty"`
	// Conflicts counts every allocation conflict of the pool, however many
	// ValidationErrors leaves out; absent when there is none.
	// +optional
	Conflicts *AllocationConflicts `json:"conflicts,omitempty"`
	// ObservedSliceCount is how many slices of the current generation exist.
	ObservedSliceCount int32 `json:"observedSliceCount"`
	// ExpectedSliceCount is the pool's resourceSliceCount.
	ExpectedSliceCount int32 `json:"expectedSliceCount"`
	// ObservedGeneration is the pool generation the status describes (the
	// slices' spec.pool.generation, not metadata.generation).
	ObservedGeneration int64 `json:"observedGeneration"`
	// LastUpdateTime is when the scheduler computed this status.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
	// DeviceHealthPolicy is what the scheduler does with devices kubelet
	// reported Unhealthy (its deviceHealth.policy, one per scheduler):
	// Taint (as Avoid, and each is also a NoSchedule DeviceTaintRule every
	// scheduler obeys), Avoid (they are not handed to new claims, and count
	// as Unavailable with reason Unhealthy) or Ignore (they are handed out
	// as any other).
	// +optional
	DeviceHealthPolicy string `json:"deviceHealthPolicy,omitempty"`
	// Devices lists every device of the pool that is not Available or that
	// kubelet reported Unhealthy, with its state and, for Unavailable ones,
	// the reason. It names no claim: a
	// reader who may list only some claims still learns which devices the
	// others hold, and nothing about those claims.
	// +optional
	// +listType=map
	// +listMapKey=name
	Devices []DeviceStatus `json:"devices,omitempty"`
	// TruncatedDeviceCount counts the devices left out of Devices, which
	// holds at most MaxDevices, and at most 1.25 MiB of them encoded
	// (Unhealthy and Unavailable ones first).
	// +optional
	TruncatedDeviceCount int32 `json:"truncatedDeviceCount,omitempty"`
}

// AllocationConflicts counts what the pool's claims hold beyond what its
// devices allow, as when two schedulers allocated the same device at once.
// The scheduler counts a conflict only once the claims involved, read from
// the API and read again unchanged, over-use the device or counter: what
// only its own in-flight allocations or informer lag show is not counted.
// It names no claim.
type AllocationConflicts struct {
	// OverAllocatedDevices counts devices held by more claims than they
	// allow.
	// +optional
	OverAllocatedDevices int32 `json:"overAllocatedDevices,omitempty"`
	// OverConsumedCapacity counts devices whose shares (consumable
	// capacity) consume more than the device's capacity.
	// +optional
	OverConsumedCapacity int32 `json:"overConsumedCapacity,omitempty"`
	// OverConsumedCounters counts shared counters (partitionable devices)
	// that the allocated devices consume beyond their value.
	// +optional
	OverConsumedCounters int32 `json:"overConsumedCounters,omitempty"`
}

// MaxDevices is the most devices a ResourcePool status lists (the CRD's
// maxItems of status.devices); a pool with more that are not Available is
// published with the rest counted in TruncatedDeviceCount, not refused.
const MaxDevices = 8192

// DeviceStatus is the state of one device that cannot take a new exclusive
// allocation, or that was reported Unhealthy.
type DeviceStatus struct {
	// Name of the device in its ResourceSlice.
	Name string `json:"name"`
	// State: Allocated, PartiallyAllocated or Unavailable; Available only for
	// an Unhealthy device that the scheduler still hands out
	// (deviceHealth.policy Ignore).
	State string `json:"state"`
	// Reason an Unavailable device is: Tainted (a NoSchedule or NoExecute
	// taint, from its slice or a DeviceTaintRule), CountersExhausted (its
	// partitionable parent's shared counters are used up) or Unhealthy
	// (kubelet reported it so and deviceHealthPolicy is Taint or Avoid;
	// drascope's own taint is then not reported as Tainted). Empty for
	// every other state.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the detail of Reason for people, such as
	// "maintenance=true:NoSchedule" or "reported by kubelet on node N at ...".
	// It never names a pod or a namespace: ResourcePools are cluster-scoped.
	// +optional
	Message string `json:"message,omitempty"`
	// Health is what kubelet last reported for the device in a pod's status
	// (KEP-4680) as the scheduler remembers it: Healthy, Unhealthy or
	// Unknown. Empty when no report is known.
	// +optional
	Health string `json:"health,omitempty"`
	// HealthMessage says which node's kubelet reported the health, when,
	// and its message; never the pod, which belongs to a tenant.
	// +optional
	HealthMessage string `json:"healthMessage,omitempty"`
}

// PoolSummary counts devices. availableDevices = totalDevices -
// allocatedDevices - unavailableDevices; partiallyAllocatedDevices are part
// of allocatedDevices.
type PoolSummary struct {
	TotalDevices              int32 `json:"totalDevices"`
	AllocatedDevices          int32 `json:"allocatedDevices"`
	AvailableDevices          int32 `json:"availableDevices"`
	UnavailableDevices        int32 `json:"unavailableDevices"`
	PartiallyAllocatedDevices int32 `json:"partiallyAllocatedDevices"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ResourcePoolList is a list of ResourcePools.
type ResourcePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ResourcePool `json:"items"`
}
