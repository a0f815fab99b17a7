package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	upstreamdefaults "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"k8s.io/utils/ptr"
)

// DefaultMinPublishInterval is the default of poolStatus.minPublishInterval.
const DefaultMinPublishInterval = time.Second

// DefaultMaxWritesPerSecond is the default of poolStatus.maxWritesPerSecond.
// It was chosen with test/perf (docs/perf.md): at 5, publishing costs no
// measurable scheduling throughput.
const DefaultMaxWritesPerSecond = 5

// DefaultMaxCreationsPerSecond is the default of
// poolStatus.maxCreationsPerSecond: after an install on a 5000-node
// cluster, every pool shows in about 100s; each creation is one small
// request, the rate kube-scheduler's default client (clientConnection.qps)
// is allowed.
const DefaultMaxCreationsPerSecond = 50

// DefaultMaxPublishDelay is the default of poolStatus.maxPublishDelay:
// KEP-5677's SLO for ResourcePool status.
const DefaultMaxPublishDelay = 10 * time.Second

// DefaultUnhealthyHoldTime is the default of deviceHealth.unhealthyHoldTime.
const DefaultUnhealthyHoldTime = 10 * time.Minute

// SetDefaults_DRAScopeArgs fills unset fields. The two timeouts take the
// upstream DynamicResources defaults, which depend on feature gates, by
// running upstream's own defaulting on them.
func SetDefaults_DRAScopeArgs(obj *DRAScopeArgs) {
	upstream := schedconfigv1.DynamicResourcesArgs{
		FilterTimeout:  obj.FilterTimeout,
		BindingTimeout: obj.BindingTimeout,
	}
	upstreamdefaults.SetDefaults_DynamicResourcesArgs(&upstream)
	obj.FilterTimeout = upstream.FilterTimeout
	obj.BindingTimeout = upstream.BindingTimeout

	if obj.AdminAccess.RequireNamespaceLabel == nil {
		obj.AdminAccess.RequireNamespaceLabel = ptr.To(true)
	}
	if obj.PoolStatus.PublishResourcePools == nil {
		obj.PoolStatus.PublishResourcePools = ptr.To(true)
	}
	if obj.PoolStatus.MinPublishInterval == nil {
		obj.PoolStatus.MinPublishInterval = &metav1.Duration{Duration: DefaultMinPublishInterval}
	}
	if obj.PoolStatus.MaxWritesPerSecond == nil {
		obj.PoolStatus.MaxWritesPerSecond = ptr.To[int32](DefaultMaxWritesPerSecond)
	}
	if obj.PoolStatus.MaxCreationsPerSecond == nil {
		obj.PoolStatus.MaxCreationsPerSecond = ptr.To[int32](DefaultMaxCreationsPerSecond)
	}
	if obj.PoolStatus.MaxPublishDelay == nil {
		obj.PoolStatus.MaxPublishDelay = &metav1.Duration{Duration: DefaultMaxPublishDelay}
	}
	// deviceHealth.policy stays unset: the scheduler picks Taint or Avoid
	// at start, from the DRADeviceTaintRules gate (config.DeviceHealthPolicy
	// .Resolve), which defaulting cannot see.
	if obj.DeviceHealth.UnhealthyHoldTime == nil {
		obj.DeviceHealth.UnhealthyHoldTime = &metav1.Duration{Duration: DefaultUnhealthyHoldTime}
	}
	if obj.Scoring.Strategy == "" {
		obj.Scoring.Strategy = ScoringNone
	}
	if obj.DeviceChoice == "" {
		obj.DeviceChoice = DeviceChoiceFirstFit
	}
}
