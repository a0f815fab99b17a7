package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DRAScopeArgs holds the arguments of the DRAScope plugin.
type DRAScopeArgs struct {
	metav1.TypeMeta `json:",inline"`

	// FilterTimeout limits how long Filter may spend allocating devices for
	// one pod on one node; zero disables the limit. Handed to the upstream
	// DynamicResources plugin, with its default (10s while the
	// DRASchedulerFilterTimeout feature gate is on).
	// +optional
	FilterTimeout *metav1.Duration `json:"filterTimeout,omitempty"`

	// BindingTimeout limits how long PreBind waits for devices with binding
	// conditions. Handed to the upstream DynamicResources plugin, with its
	// default (10m while DRADeviceBindingConditions is on); at least 1s.
	// +optional
	BindingTimeout *metav1.Duration `json:"bindingTimeout,omitempty"`

	// AdminAccess configures the KEP-5018 guards that drascope adds.
	// +optional
	AdminAccess AdminAccessArgs `json:"adminAccess"`

	// PoolStatus configures pool availability reporting (KEP-5677).
	// +optional
	PoolStatus PoolStatusArgs `json:"poolStatus"`

	// DeviceHealth configures how device health that kubelet reports in pod
	// status (KEP-4680, status.containerStatuses[].allocatedResourcesStatus)
	// affects allocation.
	// +optional
	DeviceHealth DeviceHealthArgs `json:"deviceHealth"`

	// Scoring configures how DRAScope ranks the nodes a pod fits on by how
	// full their node-local devices would be with the pod's devices
	// (docs/scoring.md).
	// +optional
	Scoring ScoringArgs `json:"scoring"`
	// DeviceChoice says which devices of a node upstream's first-fit
	// allocator tries first (docs/scoring.md, "Which device"): FirstFit
	// (default: the driver's order, upstream's choice) or BestFit
	// (partitions of partly used physical devices first, so whole devices
	// stay whole; a pod's devices under one PCIe root where one has room).
	// It orders only: whether a pod fits never changes.
	// +optional
	DeviceChoice DeviceChoice `json:"deviceChoice,omitempty"`
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
	// ScoringNone adds nothing to upstream's score (which ranks only the
	// choice among a prioritized list's subrequests): upstream's placement.
	ScoringNone ScoringStrategy = "None"
	// ScoringMostAllocated prefers nodes whose devices are fuller, so that
	// whole nodes stay free for pods that need many devices.
	ScoringMostAllocated ScoringStrategy = "MostAllocated"
	// ScoringLeastAllocated prefers nodes whose devices are emptier.
	ScoringLeastAllocated ScoringStrategy = "LeastAllocated"
)

// ScoringArgs configures device-aware scoring.
type ScoringArgs struct {
	// Strategy is None (default: upstream's placement), MostAllocated
	// (pack) or LeastAllocated (spread). A prioritized list's preference
	// always comes first; the strategy ranks nodes that upstream ranks
	// alike. The plugin's weight in the profile scales it against other
	// plugins, as for any score.
	// +optional
	Strategy ScoringStrategy `json:"strategy,omitempty"`
}

// AdminAccessArgs configures how DRAScope treats claims with admin access.
type AdminAccessArgs struct {
	// RequireNamespaceLabel refuses, while filtering, to allocate a claim with
	// an admin-access request when the claim's namespace does not carry the
	// label resource.kubernetes.io/admin-access: "true". Default true.
	// +optional
	RequireNamespaceLabel *bool `json:"requireNamespaceLabel,omitempty"`
}

// PoolStatusArgs configures how pool availability is reported.
type PoolStatusArgs struct {
	// PublishResourcePools writes a ResourcePool object (drascope.dev/v1alpha1)
	// per pool, from the replica leading scheduling. Default true.
	// +optional
	PublishResourcePools *bool `json:"publishResourcePools,omitempty"`
	// MinPublishInterval is the least time between two writes of one
	// ResourcePool, for any reason (a repair after a hand edit too);
	// changes in between are coalesced into the next write. A pool is
	// written early (before its deadline) once it has not changed for this
	// long and either was not written for maxPublishDelay or no pool has
	// changed for this long (the cluster has settled, as after a burst or
	// a failover). Default 1s; must be positive.
	// +optional
	MinPublishInterval *metav1.Duration `json:"minPublishInterval,omitempty"`
	// MaxWritesPerSecond is the budget of early writes: writes of quiet
	// pools before their deadline (see maxPublishDelay), and repairs.
	// A pool whose change reaches its deadline is written whatever the
	// budget. Default 5; must be at least 1.
	// +optional
	MaxWritesPerSecond *int32 `json:"maxWritesPerSecond,omitempty"`
	// MaxCreationsPerSecond paces the first publication of pools: the
	// creation of the object of a pool that has none (after an install,
	// a leader change that lost objects, or nodes joining), from a budget
	// of its own, a second's worth at once and then this many a second.
	// Each creation is one request (two under a CRD from older manifests,
	// with a status subresource), which takes its token from the
	// scheduler client's rate limiter (clientConnection.qps) as binding
	// does. Default 50 (5000 pools in about 100s); must be at least 1.
	// +optional
	MaxCreationsPerSecond *int32 `json:"maxCreationsPerSecond,omitempty"`
	// MaxPublishDelay is the delay from an allocation change to the
	// ResourcePool write that shows it (KEP-5677's SLO: 95% within 10s).
	// Every change has a deadline: its time plus this delay, less what
	// its write and the writes queued ahead of it will take (at most half
	// of it); it is written by then, whatever maxWritesPerSecond, and so
	// all but a few writes land within this delay. A pool that keeps
	// changing is written about once per this delay. The first
	// publication of a new pool is paced apart and not held to it.
	// Default 10s; must be at least twice minPublishInterval.
	// +optional
	MaxPublishDelay *metav1.Duration `json:"maxPublishDelay,omitempty"`
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

// DeviceHealthArgs configures health-aware allocation.
type DeviceHealthArgs struct {
	// Policy is Taint, Avoid or Ignore. Unset, the scheduler picks Taint
	// where DeviceTaintRules can be written (the DRADeviceTaintRules gate is
	// on, GA in 1.37, and the apiserver serves them) and Avoid elsewhere
	// (1.35, and 1.36 unless enabled, through --emulated-version), and logs which;
	// ResourcePools publish the policy in force. An explicit Taint with the
	// gate off stops the scheduler at start.
	// +optional
	Policy DeviceHealthPolicy `json:"policy,omitempty"`
	// UnhealthyHoldTime is how long a device stays Unhealthy after the last
	// pod reporting it Unhealthy is deleted or reports otherwise, when no
	// Healthy report follows; then it is Unknown,
	// which scheduling treats as healthy. Default 10m; must be positive.
	// +optional
	UnhealthyHoldTime *metav1.Duration `json:"unhealthyHoldTime,omitempty"`
}
