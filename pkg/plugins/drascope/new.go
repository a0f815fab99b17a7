package drascope

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drascope/drascope/apis/config"
	_ "github.com/drascope/drascope/apis/config/scheme" // registers DRAScopeArgs with the kube-scheduler
	configv1 "github.com/drascope/drascope/apis/config/v1"
	"github.com/drascope/drascope/apis/config/validation"
	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/dramanager"
	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/dryrun"
	"github.com/drascope/drascope/pkg/filtermemo"
	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/nodeprune"
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
		enabled:     fts.EnableDynamicResourceAllocation,
		features:    fts,
		adminAccess: adminaccess.Guard{Enabled: fts.EnableDRAAdminAccess, RequireNamespaceLabel: args.AdminAccess.RequireNamespaceLabel},
		scoring:     args.Scoring.Strategy,
	}
	var handle fwk.Handle = fh
	if pl.enabled {
		if handle, err = pl.joinRuntime(ctx, fh, rt, args); err != nil {
			return nil, err
		}
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
	if pl.enabled && pl.adminAccess.RequireNamespaceLabel {
		if err := pl.watchNamespaceLabels(ctx, fh); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// joinRuntime joins the scheduler-wide runtime and sets up what DRAScope
// needs besides upstream's plugin; it returns the handle upstream's plugin
// gets, whose DRA manager is drascope's decorator.
func (pl *DRAScope) joinRuntime(ctx context.Context, fh fwk.Handle, rt *draruntime.Runtime, args *config.DRAScopeArgs) (fwk.Handle, error) {
	if err := rt.Join(ctx, fh, args); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl.pools, pl.waiting, pl.quotas = rt.Pools(), rt, rt
	var withheld dramanager.Withheld
	if rt.Withholds() {
		pl.health = rt.Health()
		withheld = pl.health
		pl.classes = fh.SharedInformerFactory().Resource().V1().DeviceClasses().Lister()
	}
	// The side cache and node pruning's index both follow the scheduler's
	// in-flight allocations.
	pl.index = rt.Index()
	pl.filterMemo = &filtermemo.Memo{}
	manager := dramanager.New(fh.SharedDRAManager(), dramanager.Observers{pl.pools, pl.index}, withheld, rt.Holds())
	if args.DeviceChoice == config.DeviceChoiceBestFit {
		manager.OrderBestFit()
	}
	pl.claims, pl.manager = manager.ResourceClaims(), manager
	pods := fh.SharedInformerFactory().Core().V1().Pods()
	pl.pods = pods.Lister()
	registration, err := pods.Informer().AddEventHandler(pl.holders.Handlers())
	if err != nil {
		return nil, fmt.Errorf("%s: following pods that hold claims: %w", Name, err)
	}
	pl.holders.Synced = registration.HasSynced
	pl.handle = fh
	fts := pl.features
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
	return &decoratedHandle{Handle: fh, draManager: manager}, nil
}

// watchNamespaceLabels retries waiting pods when their namespace gains the
// admin-access label (events.go). The scheduler already watches
// namespaces (InterPodAffinity's namespaceSelector) and pods, so this adds
// no watch.
func (pl *DRAScope) watchNamespaceLabels(ctx context.Context, fh fwk.Handle) error {
	informers := fh.SharedInformerFactory().Core().V1()
	pl.adminAccess.Namespaces = informers.Namespaces().Lister()
	pl.activator = fh
	pl.profileName = fh.ProfileName()
	logger := klog.FromContext(ctx)
	if _, err := informers.Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { pl.retryWhenNamespaceLabelled(logger, nil, obj) },
		UpdateFunc: func(oldObj, newObj interface{}) { pl.retryWhenNamespaceLabelled(logger, oldObj, newObj) },
	}); err != nil {
		return fmt.Errorf("%s: watching namespace labels: %w", Name, err)
	}
	return nil
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

// defaultArgs returns the args a config without a DRAScope pluginConfig entry
// gets: v1 defaults, converted to the internal type.
func defaultArgs() (*config.DRAScopeArgs, error) {
	versioned := &configv1.DRAScopeArgs{}
	schedscheme.Scheme.Default(versioned)
	args := &config.DRAScopeArgs{}
	if err := schedscheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("defaulting %s plugin args: %w", Name, err)
	}
	return args, nil
}

// decoratedHandle is the framework.Handle that upstream's DynamicResources
// plugin receives: the scheduler's own handle, except that SharedDRAManager
// returns drascope's decorator (pkg/dramanager).
type decoratedHandle struct {
	fwk.Handle
	draManager fwk.SharedDRAManager
}

func (h *decoratedHandle) SharedDRAManager() fwk.SharedDRAManager {
	return h.draManager
}
