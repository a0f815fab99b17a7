// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/drascope/drascope/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io

// Package v1 holds the versioned DRAScope plugin args, as written in a
// KubeSchedulerConfiguration (apiVersion kubescheduler.config.k8s.io/v1).
package v1
