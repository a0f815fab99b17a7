// +k8s:deepcopy-gen=package
// +groupName=drascope.dev

// Package v1alpha1 holds the ResourcePool API (group drascope.dev): one
// cluster-scoped object per DRA pool, whose status drascope-scheduler keeps
// current with the pool's availability (KEP-5677).
package v1alpha1
