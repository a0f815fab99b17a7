// Package drascope is the DRAScope scheduler plugin: upstream's
// DynamicResources plugin, wrapped rather than copied, and the seam between
// the scheduler framework and drascope's features.
//
// The package holds only the seam. Each extension point DRAScope overrides
// has a file named as the framework names it (prefilter.go, filter.go,
// postfilter.go, podgrouppostfilter.go, score.go, reserve.go, prebind.go,
// events.go, prefilterextensions.go); every piece of per-cycle state is
// declared in cyclestate.go; new.go builds the plugin and the handle
// upstream's plugin is handed, whose DRA manager is pkg/dramanager's
// decorator; the plugin sets, for each cycle, how that decorator answers.
// The features themselves are packages that
// know nothing of the framework: pkg/nodeprune (pruning), pkg/filtermemo,
// pkg/whatif and pkg/victims (preemption's dry runs), pkg/gangplan and
// pkg/gangpreempt (gangs), pkg/adminaccess, pkg/withheld, pkg/devicescore,
// pkg/devicechoice, pkg/claimholders. docs/design.md opens with a tour.
package drascope

import (
	"time"

	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/claimholders"
	"github.com/drascope/drascope/pkg/dramanager"
	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/filtermemo"
	"github.com/drascope/drascope/pkg/gangplan"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/victims"
	"github.com/drascope/drascope/pkg/withheld"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = config.PluginName

// DRAScope embeds the upstream plugin, so every extension point upstream
// implements and DRAScope does not override (PreEnqueue, SignPod,
// PostBind, ...) is upstream's. The plugin README's table lists the ones it
// overrides, and a test keeps that table true.
type DRAScope struct {
	*dynamicresources.DynamicResources

	enabled bool
	// features are the scheduler's, as upstream's plugin reads them.
	features    feature.Features
	adminAccess adminaccess.Guard
	// scoring is the device-aware scoring strategy (score.go).
	scoring config.ScoringStrategy
	claims  fwk.ResourceClaimTracker
	// manager is the decorated DRA manager upstream's plugin uses.
	manager *dramanager.Manager
	// index answers node pruning, scheduler-wide (nil: the pass over
	// every slice answers, with deviceIDs caching the slices' device IDs).
	index     *nodeprune.Index
	deviceIDs nodeprune.DeviceIDs
	// shortages are the pending pods' last reasons for pruning's
	// refusal (prune.go).
	shortages nodeprune.Shortages
	// holders are the nodes of pods holding claims, by priority.
	holders     claimholders.Holders
	pods        corelisters.PodLister
	activator   fwk.PodActivator
	profileName string

	// pools is the scheduler's side cache.
	pools *poolcache.Cache
	// health is the scheduler's device health cache under
	// deviceHealth.policy Avoid, nil under Ignore: the devices it reports
	// Unhealthy are withheld.
	health *health.Cache
	// classes resolve the device classes a pod asks for, so that a refusal
	// names only the withheld devices it could use.
	classes resourcelisters.DeviceClassLister
	// waiting are the pods to retry when a withheld device recovers or a
	// release hold ends.
	waiting interface {
		RetryWhenDevicesFree(*v1.Pod)
		ForgetWaitingPod(*v1.Pod)
	}
	// quotas are the DeviceQuotas Reserve enforces (quota.go).
	quotas quotaRuntime

	// allocating is what DRAScope's own allocator runs need besides
	// devices (preemption's dry runs, gang planning); its RunTimeout,
	// upstream's filterTimeout, bounds each run as it bounds upstream's
	// Filter, and cycleBudget all the runs of one scheduling or pod-group
	// cycle together.
	allocating  dryrun.Allocating
	cycleBudget time.Duration
	// nodeAllocatableResources: DRANodeAllocatableResources, which a dry
	// run does not check (dryRunAllocates).
	nodeAllocatableResources bool
	// filterMemo answers Filter for nodes accepted before with the same
	// inputs.
	filterMemo *filtermemo.Memo
	// countersReachEveryNode: the allocator upstream builds reads slices
	// with shared counters on every node (nodeprune.PoolsReaching).
	countersReachEveryNode bool
	// handle is the scheduler's, for the cycle's node snapshot.
	handle fwk.Handle
	// gangPlans steer gang members to devices chosen for all of them at
	// once (podgrouppostfilter.go).
	gangPlans gangplan.Plans
}

var (
	_ fwk.PreEnqueuePlugin         = &DRAScope{}
	_ fwk.PreFilterPlugin          = &DRAScope{}
	_ fwk.PreFilterExtensions      = &DRAScope{}
	_ fwk.FilterPlugin             = &DRAScope{}
	_ fwk.PostFilterPlugin         = &DRAScope{}
	_ fwk.PodGroupPostFilterPlugin = &DRAScope{}
	_ fwk.PreScorePlugin           = &DRAScope{}
	_ fwk.ScorePlugin              = &DRAScope{}
	_ fwk.ScoreExtensions          = &DRAScope{}
	_ fwk.ReservePlugin            = &DRAScope{}
	_ fwk.PreBindPlugin            = &DRAScope{}
	_ fwk.EnqueueExtensions        = &DRAScope{}
	_ fwk.SignPlugin               = &DRAScope{}
)

// Name returns the plugin's name, which the framework uses in metrics, logs
// and pod status messages.
func (pl *DRAScope) Name() string {
	return Name
}

// victimView reads claims and pods as the scheduler sees them now, for
// preemption's dry runs (pkg/victims).
func (pl *DRAScope) victimView() victims.View {
	view := victims.View{Claims: pl.claims, Pods: pl.pods}
	if pl.manager != nil {
		view.InFlight = pl.manager.Claims().InFlight
	}
	return view
}

// withheldSource is where the withheld devices' explanations read from.
func (pl *DRAScope) withheldSource() withheld.Source {
	return withheld.Source{Health: pl.health, Pools: pl.pools, Classes: pl.classes}
}
