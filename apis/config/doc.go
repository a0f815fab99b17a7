// +k8s:deepcopy-gen=package
// +groupName=kubescheduler.config.k8s.io

// Package config holds the internal types of the DRAScope plugin args. They
// live in the kube-scheduler's config group so that a KubeSchedulerConfiguration
// file decodes them by plugin name (DRAScope -> DRAScopeArgs), strictly.
package config
