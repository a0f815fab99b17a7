package v1alpha1

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DeviceQuota limits what the DRA devices allocated to the ResourceClaims
// of its namespace may add up to, per device class: how many devices, how
// much of the shared counters they consume (a GPU's memory, for its
// partitions), and how much consumable capacity their shares take.
// drascope-scheduler counts what the allocator chose, when it chose it,
// and never allocates a claim whose result would take the namespace over a
// limit; several DeviceQuotas in one namespace all apply. Claims that ask
// only for admin access use nothing and do not count.
type DeviceQuota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec DeviceQuotaSpec `json:"spec"`
	// +optional
	Status DeviceQuotaStatus `json:"status,omitempty"`
}

// MaxQuotaClasses bounds the device classes one DeviceQuota limits, and
// MaxQuotaAmounts the counters or capacities it limits per class.
const (
	MaxQuotaClasses = 32
	MaxQuotaAmounts = 16
)

// DeviceQuotaSpec holds the limits.
type DeviceQuotaSpec struct {
	// Limits, at most one per device class.
	// +listType=map
	// +listMapKey=deviceClassName
	Limits []DeviceClassLimit `json:"limits"`
}

// DeviceClassLimit limits the devices allocated for requests of one
// device class.
type DeviceClassLimit struct {
	// DeviceClassName is the class whose devices count: those allocated
	// for a request, or for the chosen alternative of a prioritized list,
	// that names it.
	DeviceClassName string `json:"deviceClassName"`
	// DeviceAmounts are the limits; an amount left out is not limited.
	DeviceAmounts `json:",inline"`
}

// DeviceAmounts are amounts of devices: a count, shared counters and
// consumable capacity.
type DeviceAmounts struct {
	// Devices counts devices allocated; a device shared by several claims
	// (allowMultipleAllocations) counts once per claim that holds a share.
	// +optional
	Devices *int64 `json:"devices,omitempty"`
	// Counters, by counter name, sum what the allocated devices consume of
	// their pools' shared counters (devices[].consumesCounters), over
	// every counter set.
	// +optional
	Counters map[string]resource.Quantity `json:"counters,omitempty"`
	// Capacity, by capacity name, sums the consumable capacity that the
	// allocations of shared devices consume (consumedCapacity).
	// +optional
	Capacity map[resourceapi.QualifiedName]resource.Quantity `json:"capacity,omitempty"`
}

// DeviceQuotaStatus is what counts now against each limited class.
type DeviceQuotaStatus struct {
	// Classes holds, per limited class, what is used and what is left.
	// +optional
	// +listType=map
	// +listMapKey=deviceClassName
	Classes []DeviceClassUsage `json:"classes,omitempty"`
	// ObservedGeneration is the generation of the spec the status counts
	// against.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// DeviceClassUsage is one class's usage.
type DeviceClassUsage struct {
	DeviceClassName string `json:"deviceClassName"`
	// Used counts the allocations of the namespace's claims, including
	// those drascope-scheduler has made and not yet written.
	Used DeviceAmounts `json:"used"`
	// Left is the limit less what is used, for each amount limited; never
	// below zero (a limit lowered below what is used leaves zero).
	Left DeviceAmounts `json:"left"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DeviceQuotaList is a list of DeviceQuotas.
type DeviceQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeviceQuota `json:"items"`
}
