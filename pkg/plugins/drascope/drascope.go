// Package drascope is the DRAScope scheduler plugin: upstream's
// DynamicResources plugin, wrapped rather than copied, with drascope's
// admin-access guards in front of it and a decorated DRA manager beneath it.
package drascope

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drascope/drascope/apis/config"
	_ "github.com/drascope/drascope/apis/config/scheme" // registers DRAScopeArgs with the kube-scheduler
	"github.com/drascope/drascope/apis/config/validation"
	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/poolcache"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = config.PluginName

// DRAScope embeds the upstream plugin, so every extension point upstream
// implements (PreEnqueue, Filter, PostFilter, Score, Reserve, PreBind,
// EventsToRegister, SignPod, ...) is DRAScope's too. It overrides Name,
// PreFilter (admin-access guards; admin access without shared counters),
// Filter (explains withheld Unhealthy devices and mixed admin access),
// PreScore, ScoreExtensions and NormalizeScore (device-aware scoring) and
// EventsToRegister (adds health reports).
type DRAScope struct {
	*dynamicresources.DynamicResources

	enabled            bool
	adminAccessEnabled bool
	// features are the scheduler's, as upstream's plugin reads them.
	features              feature.Features
	requireNamespaceLabel bool
	// scoring is the device-aware scoring strategy (scoring.go).
	scoring config.ScoringStrategy
	claims  fwk.ResourceClaimTracker
	// manager is the decorated DRA manager upstream's plugin uses.
	manager *draManager
	// index answers node pruning, scheduler-wide (nil: the pass over
	// every slice answers, with deviceIDs caching the slices' device IDs);
	// claimHolders are the nodes of pods holding claims, by priority
	// (holders.go).
	index        *nodeprune.Index
	deviceIDs    nodeprune.DeviceIDs
	claimHolders claimHolders
	namespaces   corelisters.NamespaceLister
	pods         corelisters.PodLister
	activator    fwk.PodActivator
	profileName  string

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

	// allocating is what DRAScope's own allocator runs need besides
	// devices (preemption.go, gangs.go); its RunTimeout, upstream's
	// filterTimeout, bounds each run as it bounds upstream's Filter, and
	// cycleBudget all the runs of one scheduling or pod-group cycle
	// together.
	allocating  dryrun.Allocating
	cycleBudget time.Duration
	// nodeAllocatableResources: preemption.go, newWhatIf.
	nodeAllocatableResources bool
	// filterMemo answers Filter for nodes accepted before with the same
	// inputs (filtermemo.go).
	filterMemo *filterMemo
	// countersReachEveryNode: the allocator upstream builds reads slices
	// with shared counters on every node (nodeprune.PoolsReaching).
	countersReachEveryNode bool
	// handle is the scheduler's, for the cycle's node snapshot.
	handle fwk.Handle
	// gangPlans steer gang members to devices chosen for all of them at
	// once (gangs.go).
	gangPlans gangPlans
}

var (
	_ fwk.PreEnqueuePlugin         = &DRAScope{}
	_ fwk.PreFilterPlugin          = &DRAScope{}
	_ fwk.PreFilterExtensions      = &DRAScope{}
	_ fwk.FilterPlugin             = &DRAScope{}
	_ fwk.PostFilterPlugin         = &DRAScope{}
	_ fwk.PodGroupPostFilterPlugin = &DRAScope{}
	_ fwk.ScorePlugin              = &DRAScope{}
	_ fwk.ReservePlugin            = &DRAScope{}
	_ fwk.PreBindPlugin            = &DRAScope{}
	_ fwk.EnqueueExtensions        = &DRAScope{}
	_ fwk.SignPlugin               = &DRAScope{}
)

// Factory returns the plugin factory of a scheduler whose DRAScope
// profiles share rt; make one runtime per scheduler:
//
//	rt := draruntime.New()
//	app.NewSchedulerCommand(app.WithPlugin(drascope.Name, drascope.Factory(rt)))
//
// Invalid args, and scheduler-wide args that differ from those of another
// DRAScope profile, fail here, so the scheduler stops at start with the
// field paths in the message.
func Factory(rt *draruntime.Runtime) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, fh, rt)
	}
}

func newPlugin(ctx context.Context, obj runtime.Object, fh fwk.Handle, rt *draruntime.Runtime) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	if errs := validation.ValidateDRAScopeArgs(validation.ArgsPath(""), args, fts); len(errs) > 0 {
		return nil, fmt.Errorf("invalid %s plugin args: %w", Name, errs.ToAggregate())
	}

	pl := &DRAScope{
		enabled:               fts.EnableDynamicResourceAllocation,
		features:              fts,
		adminAccessEnabled:    fts.EnableDRAAdminAccess,
		requireNamespaceLabel: args.AdminAccess.RequireNamespaceLabel,
		scoring:               args.Scoring.Strategy,
	}
	var handle fwk.Handle = fh
	if pl.enabled {
		if err := rt.Join(ctx, fh, args); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		pl.pools, pl.waiting = rt.Pools(), rt
		var withheld Withheld
		if rt.Withholds() {
			pl.health = rt.Health()
			withheld = pl.health
			pl.classes = fh.SharedInformerFactory().Resource().V1().DeviceClasses().Lister()
		}
		// The side cache and node pruning's index both follow the
		// scheduler's in-flight allocations.
		pl.index = rt.Index()
		pl.filterMemo = &filterMemo{}
		manager := newDRAManager(fh.SharedDRAManager(), observers{pl.pools, pl.index}, withheld, rt.Holds())
		if args.DeviceChoice == config.DeviceChoiceBestFit {
			manager.bestFit = &bestFit{}
		}
		handle = &decoratedHandle{Handle: fh, draManager: manager}
		pl.claims, pl.manager = manager.ResourceClaims(), manager
		pods := fh.SharedInformerFactory().Core().V1().Pods()
		pl.pods = pods.Lister()
		registration, err := pods.Informer().AddEventHandler(pl.claimHolders.handlers())
		if err != nil {
			return nil, fmt.Errorf("%s: following pods that hold claims: %w", Name, err)
		}
		pl.claimHolders.synced = registration.HasSynced
		pl.handle = fh
		pl.allocating = dryrun.Allocating{
			Features: dynamicresources.AllocatorFeatures(fts),
			Classes:  manager.DeviceClasses(),
			CEL: cel.NewCache(10, cel.Features{
				EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
				EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
			}),
			Observe: metrics.ObserveAllocationRun,
		}
		pl.allocating.RunTimeout, pl.cycleBudget = runBounds(fts.EnableDRASchedulerFilterTimeout, args.FilterTimeout)
		pl.nodeAllocatableResources = fts.EnableDRANodeAllocatableResources
		pl.countersReachEveryNode = nodeprune.CountersReachEveryNode(pl.allocating.Features)
	}
	upstreamArgs := &schedconfig.DynamicResourcesArgs{
		FilterTimeout:  args.FilterTimeout,
		BindingTimeout: args.BindingTimeout,
	}
	upstream, err := dynamicresources.New(ctx, upstreamArgs, handle, fts)
	if err != nil {
		return nil, err
	}
	pl.DynamicResources = upstream.(*dynamicresources.DynamicResources)
	if pl.enabled && pl.requireNamespaceLabel {
		// The scheduler already watches namespaces (InterPodAffinity's
		// namespaceSelector) and pods, so these add no watch.
		informers := fh.SharedInformerFactory().Core().V1()
		pl.namespaces = informers.Namespaces().Lister()
		pl.activator = fh
		pl.profileName = fh.ProfileName()
		logger := klog.FromContext(ctx)
		if _, err := informers.Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { pl.retryWhenNamespaceLabelled(logger, nil, obj) },
			UpdateFunc: func(oldObj, newObj interface{}) { pl.retryWhenNamespaceLabelled(logger, oldObj, newObj) },
		}); err != nil {
			return nil, fmt.Errorf("%s: watching namespace labels: %w", Name, err)
		}
	}
	return pl, nil
}

// runBounds are the bounds of DRAScope's own allocator runs: each as long
// as upstream's Filter may run (filterTimeout, upstream's default when the
// gate is off or the timeout is 0, which turn upstream's bound off but
// must not turn off drascope's), and all of one cycle together no longer
// than one such run.
func runBounds(gate bool, filterTimeout *metav1.Duration) (run, cycle time.Duration) {
	run = dryrun.DefaultRunTimeout
	if gate && filterTimeout != nil && filterTimeout.Duration > 0 {
		run = filterTimeout.Duration
	}
	return run, run
}

// decodeArgs accepts the internal args the kube-scheduler hands over after
// decoding and defaulting a config file. A missing pluginConfig entry cannot
// happen through that path (the scheduler appends a defaulted one), but a
// caller building a framework by hand may pass nil.
func decodeArgs(obj runtime.Object) (*config.DRAScopeArgs, error) {
	if obj == nil {
		return defaultArgs()
	}
	args, ok := obj.(*config.DRAScopeArgs)
	if !ok {
		return nil, fmt.Errorf("%s plugin args: got %T, want *DRAScopeArgs", Name, obj)
	}
	return args, nil
}

// Name returns the plugin's name, which the framework uses in metrics, logs
// and pod status messages.
func (pl *DRAScope) Name() string {
	return Name
}

// PreFilter runs upstream's PreFilter (without shared counters for a pod
// that asks for admin access only: adminaccess_counters.go), then
// drascope's admin-access guards; then it keeps what upstream's allocator
// was built from for preemption's dry runs (preemption.go) and prunes the
// nodes (prune.go).
// Upstream goes first because its PostFilter expects the cycle state its
// PreFilter writes; refusing before it would turn a clear "unschedulable"
// into a PostFilter error. The one exception is pruning, which runs first
// where upstream's PreFilter would build an allocator from the in-use set
// and slices alone (prunefirst.go): a pod no node can serve is refused
// there, where upstream's PreFilter and PostFilter provably change
// nothing, and DRAScope's PostFilter answers for upstream's.
// Both run before anything is reserved.
func (pl *DRAScope) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if pl.manager != nil {
		// What upstream's PreFilter hands its allocator this cycle, and
		// only that, is what node pruning reads.
		pl.manager.capture.begin()
	}
	claims, gathered := &podClaims{}, false
	if pl.enabled && len(pod.Spec.ResourceClaims) > 0 {
		claims, gathered = pl.claimsOf(pod), true
		state.Write(podClaimsKey, claims)
	}
	if pl.manager != nil && pl.manager.bestFit != nil {
		pl.manager.bestFit.want.Store(int32(wantedDevices(claims)))
	}
	if pl.health != nil {
		withheld := &withheldDevices{}
		if gathered {
			withheld.claims = claims
		}
		state.Write(withheldStateKey, withheld)
	}
	if pl.waiting != nil && (gathered || requestsExtendedResources(pod)) && pl.manager.claims.mayBeFreedSilently() {
		// Held devices, or devices in flight that a failed write would
		// hold, may refuse this pod; when the hold ends, no event says so.
		// Remembered before upstream's PreFilter takes the in-use set, so
		// that a hold ending in between still retries the pod.
		pl.waiting.RetryWhenDevicesFree(pod)
	}
	var first *prunedFirst
	if gathered {
		// Pruned before upstream's PreFilter where that is the same
		// (prunefirst.go): on a full cluster most pods are refused there,
		// and elsewhere upstream's allocator is set up over the
		// candidates only.
		var status *fwk.Status
		if first, status = pl.pruneFirst(ctx, state, pod, nodes, claims); status != nil {
			return nil, status
		}
	}
	if pl.manager != nil && pl.manager.bestFit != nil {
		pl.manager.bestFit.active.Store(true)
	}
	// A gang member planned by PodGroupPostFilter (gangs.go) gets its
	// planned devices from upstream's allocator, on its planned node.
	plan, stopSteering := pl.steerFor(pod)
	// In a pod-group preemption's dry run, the victims' devices are free
	// (gangpreemption.go).
	dryRun, stopFreeing := pl.freeVictimsDevices(ctx, pod, claims)
	result, status, first := pl.upstreamPreFilter(ctx, state, pod, nodes, claims, first)
	stopFreeing()
	stopSteering()
	if pl.manager != nil && pl.manager.bestFit != nil {
		pl.manager.bestFit.active.Store(false)
	}
	var attempt *gangAttempt
	if pl.manager != nil && pod.Spec.SchedulingGroup != nil {
		attempt = gangAttemptOf(state)
		if plan != nil {
			attempt.markSteered()
		}
	}
	if !status.IsSuccess() || !pl.enabled {
		return result, status
	}
	if status := pl.checkAdminAccess(ctx, pod, claims); !status.IsSuccess() {
		return nil, status
	}
	if first != nil && result.AllNodes() {
		// Pruned already. The pod is no gang member and not nominated
		// (mayPruneFirst): no plan, no dry run, no node to stay on.
		if w := pl.newWhatIf(first.view, claims); w != nil {
			state.Write(whatIfStateKey, w)
		}
		var candidates sets.Set[string]
		if first.result != nil {
			candidates = first.result.NodeNames
		}
		if memo := pl.newMemoCycle(claims, nodes, first.view, candidates); memo != nil {
			state.Write(memoCycleKey, memo)
		}
		return first.result, nil
	}
	if result.AllNodes() && gathered {
		view := pl.takeCycleView(pod, claims)
		w := pl.newWhatIf(view, claims)
		attempt.record(pod, w)
		if dryRun != nil {
			return pl.preFilterInDryRun(state, dryRun, w, keptOf(view), keepToPlan(result, plan))
		}
		if w != nil {
			state.Write(whatIfStateKey, w)
			if node := pl.nominatedNodeAwaitingVictims(ctx, pod, nodes, w); node != "" {
				klog.FromContext(ctx).V(4).Info("Staying on the nominated node while its victims' devices are released", "pod", klog.KObj(pod), "node", node)
				result = &fwk.PreFilterResult{NodeNames: sets.New(node)}
				return keepToPlan(result, plan), nil
			}
		}
		result, status = pl.pruneNodes(ctx, pod, nodes, claims, view)
		if status.IsSuccess() && result.AllNodes() && plan == nil && pod.Spec.SchedulingGroup == nil {
			// Every node is kept for a pod pruning first does not
			// serve (admin access, a nominated pod, one that may
			// preempt holders of lower priority): Filter may remember
			// as for one it serves. Not for gang members, whose cycles
			// steer and plan.
			if memo := pl.newMemoCycle(claims, nodes, view, nil); memo != nil {
				state.Write(memoCycleKey, memo)
			}
		}
	}
	if dryRun != nil {
		// Devices freed for a member the dry run cannot follow.
		return pl.preFilterInDryRun(state, dryRun, nil, nil, nil)
	}
	if status.IsSuccess() {
		result = keepToPlan(result, plan)
	}
	return result, status
}

// EventsToRegister adds, to upstream's events, deletions of pods that held
// claims (a preemptor's victims: preemption.go) and, when devices are
// withheld, status updates of running pods: kubelet's Healthy reports may
// free a withheld device.
func (pl *DRAScope) EventsToRegister(ctx context.Context) ([]fwk.ClusterEventWithHint, error) {
	events, err := pl.DynamicResources.EventsToRegister(ctx)
	if err != nil || pl.manager == nil {
		return events, err
	}
	events = append(events, fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete},
		QueueingHintFn: pl.isSchedulableAfterVictimGone,
	})
	if pl.health == nil {
		return events, nil
	}
	return append(events, fwk.ClusterEventWithHint{
		Event:          fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Update},
		QueueingHintFn: pl.isSchedulableAfterHealthReport,
	}), nil
}
