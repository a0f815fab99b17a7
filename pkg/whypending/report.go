package whypending

// The report's shape is versioned: tools read `kubectl dra describe pod -o
// json` by apiVersion and kind (docs/kubectl-dra.md, "Why is my pod
// pending"). Fields are only added within a version.
const (
	APIVersion = "drascope.dev/v1alpha1"
	Kind       = "PodDeviceReport"
)

// Report says what a pod's claims ask for and, for claims still to
// allocate, why no node takes them.
type Report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Pod is namespace/name; Node the node it is bound to, if any.
	Pod  string `json:"pod"`
	Node string `json:"node,omitempty"`
	// Claims are the pod's claims, in the pod's order.
	Claims []ClaimReport `json:"claims,omitempty"`
	// Fit says where the claims still to allocate fit, as upstream's
	// allocator answers node by node; nil when nothing is to allocate.
	Fit *FitReport `json:"fit,omitempty"`
	// Closest are the nodes that came closest, when none fits (at most
	// MaxNodesNamed).
	Closest []NodeReport `json:"closestNodes,omitempty"`
	// Conclusion is one line a person can act on.
	Conclusion string `json:"conclusion"`
	// AdminAccessRefused says why the scheduler refuses the admin access a
	// claim asks for (the namespace lacks the label), when
	// Options.AdminAccess says to check.
	AdminAccessRefused string `json:"adminAccessRefused,omitempty"`
	// QuotaRefusal names the DeviceQuota that refuses what the claims
	// still to allocate need for certain (the limit, what its status says
	// is used, and the need), when one does (filled by kubectl dra).
	QuotaRefusal string `json:"quotaRefusal,omitempty"`
	// Notes say what could not be read or checked, and how that shapes
	// the figures.
	Notes []string `json:"notes,omitempty"`
	// SchedulerMessage is the pod's PodScheduled condition message, and
	// Events its latest scheduling events, newest last (filled by
	// kubectl dra, at most MaxEvents).
	SchedulerMessage string   `json:"schedulerMessage,omitempty"`
	Events           []string `json:"events,omitempty"`
}

// ClaimReport is one claim of the pod.
type ClaimReport struct {
	// Name is the pod's name for the claim; ResourceClaim the claim's
	// namespace/name ("" when made from a template and not created yet).
	Name          string `json:"name"`
	ResourceClaim string `json:"resourceClaim,omitempty"`
	// Missing: the claim does not exist (yet); Hidden: it may not be read.
	Missing bool `json:"missing,omitempty"`
	Hidden  bool `json:"hidden,omitempty"`
	// Allocated says the claim is allocated, and AllocatedOn where (the
	// nodes its devices are on; empty for devices any node reaches).
	Allocated   bool            `json:"allocated"`
	AllocatedOn []string        `json:"allocatedOn,omitempty"`
	Requests    []RequestReport `json:"requests,omitempty"`
	// Constraints are the claim's constraints, as text.
	Constraints []string `json:"constraints,omitempty"`
}

// RequestReport is one request, or one alternative of a prioritized list
// (Name "request/subrequest").
type RequestReport struct {
	Name        string `json:"name"`
	DeviceClass string `json:"deviceClass"`
	// Selectors are the request's CEL selectors (each cut after
	// MaxExpression bytes).
	Selectors []string `json:"selectors,omitempty"`
	// AllocationMode is ExactCount or All; Count the devices asked for.
	AllocationMode string `json:"allocationMode"`
	Count          int64  `json:"count,omitempty"`
	AdminAccess    bool   `json:"adminAccess,omitempty"`
	// Capacity is what the request asks of each device's consumable
	// capacity, as name=quantity.
	Capacity []string `json:"capacity,omitempty"`
	// Verdict is nil for an allocated claim.
	Verdict *Verdict `json:"verdict,omitempty"`
}

// Verdict counts what the cluster has for one request.
type Verdict struct {
	// ClassMissing: the device class does not exist.
	ClassMissing bool `json:"classMissing,omitempty"`
	// Need is how many devices one node must have free; 0 for
	// AllocationMode All: every matching one of the node, at least one.
	Need int `json:"need"`
	// NodesWithMatching reach at least one matching device;
	// NodesWithEnough reach Need free ones.
	NodesWithMatching int `json:"nodesWithMatching"`
	NodesWithEnough   int `json:"nodesWithEnough"`
	// MostFree is the most free matching devices one node reaches, and
	// NodesWithMostFree how many reach that many.
	MostFree          int `json:"mostFree"`
	NodesWithMostFree int `json:"nodesWithMostFree"`
	// Devices counts the matching devices that a node the pod may run on
	// reaches, by state.
	Devices DeviceCounts `json:"devices"`
	// Taints are the taints that keep matching devices from the request
	// (key=value:effect; past MaxTaints, "and N more").
	Taints []string `json:"taints,omitempty"`
}

// DeviceCounts counts devices by what keeps them from a request.
type DeviceCounts struct {
	Matching int `json:"matching"`
	Free     int `json:"free"`
	// Allocated to other claims (a shared device with some capacity left
	// counts free, or short of capacity); HeldByLowerPriority of those,
	// the devices only pods of lower priority than the pod hold, which
	// preemption could free (counted only where the pods could be read).
	Allocated           int `json:"allocated"`
	HeldByLowerPriority int `json:"heldByLowerPriority,omitempty"`
	// Tainted by a NoSchedule or NoExecute taint the request does not
	// tolerate; Unhealthy as the scheduler withholds them;
	// CountersExhausted: a partition whose shared counters are used up.
	Tainted           int `json:"tainted"`
	Unhealthy         int `json:"unhealthy"`
	CountersExhausted int `json:"countersExhausted"`
	// CapacityExhausted: a shared device with less left of a consumable
	// capacity than the request asks.
	CapacityExhausted int `json:"capacityExhausted"`
}

// FitReport says where the claims still to allocate fit.
type FitReport struct {
	// Nodes are nodes where upstream's allocator allocates every claim
	// (at most MaxNodesNamed), of Count found.
	Nodes []string `json:"nodes,omitempty"`
	Count int      `json:"count"`
	// Tried is how many nodes the allocator answered for; the others
	// lack free devices for some request, or were not reached: Untried
	// counts the nodes with enough free devices left unasked when the
	// time (TimedOut) or the runs (RunsExhausted, DefaultMaxRuns) ran out.
	Tried         int  `json:"tried"`
	Untried       int  `json:"untried,omitempty"`
	TimedOut      bool `json:"timedOut,omitempty"`
	RunsExhausted bool `json:"runsExhausted,omitempty"`
	// ConstraintsFail: on the first node with enough free devices for
	// every request where the claims do not fit, they fit once their
	// constraints are dropped: the constraints are what fails (one node's
	// answer).
	ConstraintsFail bool `json:"constraintsFail,omitempty"`
}

// NodeReport is a node that came close, and what it lacks.
type NodeReport struct {
	Node string `json:"node"`
	// Lacks says, per request it cannot meet, what it has.
	Lacks []string `json:"lacks,omitempty"`
}
