package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PluginName is the name of the plugin these args configure, as a
// KubeSchedulerConfiguration names it.
const PluginName = "DRAScope"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DRAScopeArgs holds the arguments of the DRAScope plugin.
type DRAScopeArgs struct {
	metav1.TypeMeta

	// FilterTimeout is handed to the upstream DynamicResources plugin: how long
	// Filter may spend allocating devices for one pod on one node. Zero
	// disables the limit.
	FilterTimeout *metav1.Duration

	// BindingTimeout is handed to the upstream DynamicResources plugin: how
	// long PreBind waits for devices with binding conditions to become ready.
	BindingTimeout *metav1.Duration

	// AdminAccess configures the KEP-5018 guards that drascope adds.
	AdminAccess AdminAccessArgs

	// PoolStatus configures pool availability reporting (KEP-5677).
	PoolStatus PoolStatusArgs

	// DeviceHealth configures how device health reported by kubelet in pod
	// status (KEP-4680) affects allocation.
	DeviceHealth DeviceHealthArgs

	// Scoring configures how DRAScope ranks the nodes a pod fits on by how
	// full their devices are.
	Scoring ScoringArgs
	// DeviceChoice says which devices of a node the allocator tries first.
	DeviceChoice DeviceChoice
}

// DeviceChoice says which of a node's devices upstream's first-fit
// allocator tries first.
type DeviceChoice string

const (
	// DeviceChoiceFirstFit keeps the driver's order: upstream's choice.
	DeviceChoiceFirstFit DeviceChoice = "FirstFit"
	// DeviceChoiceBestFit orders each slice's devices so that partitions
	// pack onto split devices and a pod's devices share a topology group.
	DeviceChoiceBestFit DeviceChoice = "BestFit"
)

// ScoringStrategy says how DRAScope scores nodes by device use.
type ScoringStrategy string

const (
	// ScoringNone adds nothing to upstream's score (prioritized lists).
	ScoringNone ScoringStrategy = "None"
	// ScoringMostAllocated prefers nodes whose devices are fuller: packs.
	ScoringMostAllocated ScoringStrategy = "MostAllocated"
	// ScoringLeastAllocated prefers nodes whose devices are emptier: spreads.
	ScoringLeastAllocated ScoringStrategy = "LeastAllocated"
)

// ScoringArgs configures device-aware scoring.
type ScoringArgs struct {
	// Strategy is None (default), MostAllocated or LeastAllocated.
	Strategy ScoringStrategy
}

// AdminAccessArgs configures how DRAScope treats claims with admin access.
type AdminAccessArgs struct {
	// RequireNamespaceLabel refuses, while filtering, to allocate a claim with
	// an admin-access request when the claim's namespace does not carry the
	// label resource.kubernetes.io/admin-access: "true".
	RequireNamespaceLabel bool
}

// PoolStatusArgs configures how pool availability is reported.
type PoolStatusArgs struct {
	// PublishResourcePools writes a ResourcePool object per pool.
	PublishResourcePools bool
	// MinPublishInterval is the least time between two writes of one
	// ResourcePool; changes in between are coalesced.
	MinPublishInterval metav1.Duration
	// MaxWritesPerSecond is the budget of early writes (quiet pools before
	// their deadline, repairs).
	MaxWritesPerSecond int32
	// MaxCreationsPerSecond is the budget of new pools' creations.
	MaxCreationsPerSecond int32
	// MaxPublishDelay is the delay from an allocation change to its
	// ResourcePool write: every change is written by then.
	MaxPublishDelay metav1.Duration
}

// DeviceHealthPolicy says what the scheduler does with devices that kubelet
// reported Unhealthy.
type DeviceHealthPolicy string

const (
	// DeviceHealthAvoid treats Unhealthy devices as in use: the allocator never
	// picks them for a new claim. Allocated devices are never taken away.
	DeviceHealthAvoid DeviceHealthPolicy = "Avoid"
	// DeviceHealthIgnore allocates as upstream does, regardless of health.
	DeviceHealthIgnore DeviceHealthPolicy = "Ignore"
	// DeviceHealthTaint is Avoid, and the scheduler leading scheduling also
	// writes a NoSchedule DeviceTaintRule per Unhealthy device, so that
	// every scheduler avoids it and a restarted scheduler remembers it.
	DeviceHealthTaint DeviceHealthPolicy = "Taint"
)

// Resolve returns the policy in force: an unset policy is Taint where
// DeviceTaintRules can be written (taintRules: the DRADeviceTaintRules gate
// is on) and Avoid where they cannot, so that the defaults start on every
// supported cluster; a policy that is set is returned as it is.
func (p DeviceHealthPolicy) Resolve(taintRules bool) DeviceHealthPolicy {
	switch {
	case p != "":
		return p
	case taintRules:
		return DeviceHealthTaint
	default:
		return DeviceHealthAvoid
	}
}

// Withholds reports whether the policy keeps devices reported Unhealthy
// from new claims (Taint and Avoid). The scheduler allocates by it, and the
// counts of the side cache, ResourcePools and kubectl dra follow it.
func (p DeviceHealthPolicy) Withholds() bool {
	return p == DeviceHealthTaint || p == DeviceHealthAvoid
}

// DeviceHealthArgs configures health-aware allocation.
type DeviceHealthArgs struct {
	// Policy is Taint, Avoid or Ignore; empty until the scheduler resolves
	// it at start (Resolve).
	Policy DeviceHealthPolicy
	// UnhealthyHoldTime is how long a device stays Unhealthy after the last
	// pod reporting it Unhealthy is deleted or reports otherwise, when no
	// Healthy report follows; then it is Unknown,
	// which scheduling treats as healthy.
	UnhealthyHoldTime metav1.Duration
}
