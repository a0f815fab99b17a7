// +k8s:deepcopy-gen=package
// +groupName=drascope.dev

// Package v1alpha1 holds drascope's API, group drascope.dev:
// ResourcePool, one cluster-scoped object per DRA pool, whose status
// drascope-scheduler keeps current with the pool's availability
// (KEP-5677), and DeviceQuota, a namespace's limits on the devices
// allocated to its claims, which drascope-scheduler enforces when it
// allocates.
package v1alpha1
