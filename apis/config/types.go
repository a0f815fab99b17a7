package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
}
