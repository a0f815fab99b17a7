// Package draruntime is what one scheduler runs once for all its DRAScope
// profiles: the device health cache (pkg/health), the pool side cache
// (pkg/poolcache) with its metrics (pkg/metrics) and ResourcePool
// publisher (pkg/poolpublisher), and the pods waiting for a withheld device
// to recover. Pools and device health are cluster-wide, and every profile's
// plugin reports its in-flight allocations to the same side cache.
//
// Whoever builds a scheduler's plugin registry makes one Runtime and hands
// it to the plugin factory (cmd/scheduler does; so do tests and scheduler_perf
// runs that start a scheduler of their own). The first DRAScope profile the
// scheduler builds starts the runtime with its args; every later profile must
// agree with it on the scheduler-wide args, or the scheduler stops at start.
// Nothing here is package-level state: two schedulers in one process each
// have their own runtime. (Metrics are process-wide, as the legacy registry
// is: pkg/metrics shows the pools of the runtime that exported last.)
package draruntime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/clock"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/apis/config/validation"
	"github.com/drascope/drascope/pkg/conflictcheck"
	"github.com/drascope/drascope/pkg/devicequota"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/informerevents"
	"github.com/drascope/drascope/pkg/metrics"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolpublisher"
	"github.com/drascope/drascope/pkg/releasehold"
)

// Handle is what the runtime needs of the scheduler; a profile's
// framework.Handle is one. The informers are the scheduler's own, so the
// runtime adds handlers and no watch.
type Handle interface {
	SharedInformerFactory() informers.SharedInformerFactory
	ClientSet() kubernetes.Interface
	KubeConfig() *restclient.Config
	EventRecorder() events.EventRecorderLogger
	ProfileName() string
	fwk.PodActivator
}

// Runtime is one scheduler's shared DRAScope machinery. Make it with New;
// it starts on the first Join.
type Runtime struct {
	// leadership says when this process leads scheduling.
	leadership *Leadership

	mu sync.Mutex
	// first is the profile that started the runtime, and its args.
	first *profile
	// taintRules, once known, says whether DeviceTaintRules can be
	// written: the gate is on and the apiserver serves them.
	taintRules *taintRulesCheck
	// profiles are the names of every profile that joined.
	profiles  sets.Set[string]
	informers informers.SharedInformerFactory

	pools *poolcache.Cache
	// index is node pruning's availability index, fed by the claim
	// informer and every profile's in-flight allocations.
	index   *nodeprune.Index
	health  *health.Cache
	waiting *waitingPods
	// holds keep released allocations in use for every profile: the
	// in-flight allocations they protect are scheduler-wide.
	holds *releasehold.Holds
	// quotas are the DeviceQuotas enforced; nil when none are.
	quotas *deviceQuotas
	// quotaTally remembers each claim's usage for the quota checks and
	// the quotas' status (NamespaceUsage).
	quotaTally devicequota.Tally
	// publisher writes ResourcePools; nil when publishing is off.
	publisher *poolpublisher.Publisher
	// synced reports whether the side cache has every slice and claim
	// that existed when the informers started.
	synced func() bool
	// healthRestored is closed once the health cache has restored what
	// drascope's DeviceTaintRules persist.
	healthRestored chan struct{}
	// goroutines are the runtime's own, which end with the context the
	// runtime started with.
	goroutines sync.WaitGroup
}

type profile struct {
	name string
	args *config.DRAScopeArgs
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithLeadership makes the runtime write what only the process leading
// scheduling may write (DeviceTaintRules) once l leads. Without it, the
// runtime leads from the start, as a scheduler without leader election
// does: tests and scheduler_perf.
func WithLeadership(l *Leadership) Option {
	return func(r *Runtime) { r.leadership = l }
}

// New returns a runtime that has not started.
func New(opts ...Option) *Runtime {
	r := &Runtime{}
	for _, opt := range opts {
		opt(r)
	}
	if r.leadership == nil {
		r.leadership = NewLeadership()
		r.leadership.Follow(nil)
	}
	return r
}

// Join is called by the DRAScope plugin factory of every profile, with that
// profile's validated args. The first call starts the runtime with those
// args, for as long as ctx lasts; later calls check that their scheduler-wide
// args agree (validation.ValidateSchedulerWideArgs) and that they come from
// the same scheduler.
func (r *Runtime) Join(ctx context.Context, h Handle, args *config.DRAScopeArgs) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.profiles == nil {
		r.profiles = sets.New[string]()
	}
	r.profiles.Insert(h.ProfileName())
	if r.taintRules == nil {
		r.taintRules = checkTaintRules(ctx, h.ClientSet())
	}
	args = withResolvedDefaults(ctx, h.ProfileName(), args, r.taintRules)
	if r.first != nil {
		if h.SharedInformerFactory() != r.informers {
			return fmt.Errorf("the DRAScope runtime started by profile %s belongs to another scheduler: make one runtime (draruntime.New) per scheduler", r.first.name)
		}
		errs := validation.ValidateSchedulerWideArgs(validation.ArgsPath(r.first.name), r.first.args, validation.ArgsPath(h.ProfileName()), args)
		if len(errs) > 0 {
			return fmt.Errorf("scheduler-wide args differ between profiles %s and %s: %w", r.first.name, h.ProfileName(), errs.ToAggregate())
		}
		return nil
	}
	if err := r.start(ctx, h, args); err != nil {
		return err
	}
	r.first = &profile{name: h.ProfileName(), args: args}
	return nil
}

// discoveryTimeout bounds the one discovery call at start.
const discoveryTimeout = 10 * time.Second

// taintRulesCheck is whether DeviceTaintRules can be written, and why not.
type taintRulesCheck struct {
	// gateOn is the scheduler's DRADeviceTaintRules gate, which also
	// decides whether the caches follow DeviceTaintRules.
	gateOn bool
	ok     bool
	why    string
}

// checkTaintRules asks the scheduler's DRADeviceTaintRules gate and the
// apiserver's discovery whether DeviceTaintRules can be written. A 1.37
// binary has the gate on; on a 1.35 or 1.36 cluster the version skew
// policy has it run with --emulated-version, which turns the gate off, and
// discovery catches a cluster that does not serve the API all the same. A
// discovery error leaves the gate to decide.
func checkTaintRules(ctx context.Context, client kubernetes.Interface) *taintRulesCheck {
	if !utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules) {
		return &taintRulesCheck{why: "the DRADeviceTaintRules feature gate is off"}
	}
	served, err := servesResource(ctx, client.Discovery(), resourceapi.SchemeGroupVersion.String(), "devicetaintrules")
	switch {
	case err != nil:
		klog.FromContext(ctx).Info("Could not ask the apiserver whether it serves DeviceTaintRules; trusting the DRADeviceTaintRules feature gate", "err", err)
		return &taintRulesCheck{gateOn: true, ok: true}
	case !served:
		return &taintRulesCheck{gateOn: true, why: "the apiserver does not serve devicetaintrules in " + resourceapi.SchemeGroupVersion.String()}
	}
	return &taintRulesCheck{gateOn: true, ok: true}
}

// servesResource asks the apiserver's discovery, within discoveryTimeout
// (a hung apiserver must not hold the scheduler's start), whether it
// serves the resource in the group version; a group version it does not
// serve at all is no error.
func servesResource(ctx context.Context, client discovery.DiscoveryInterface, groupVersion, resource string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	resources, err := discovery.ToDiscoveryInterfaceWithContext(client).ServerResourcesForGroupVersionWithContext(ctx, groupVersion)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	for _, r := range resources.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// withResolvedDefaults returns args with the defaults that depend on the
// cluster filled in: an unset deviceHealth.policy becomes Taint where
// DeviceTaintRules can be written and Avoid where they cannot, so that the
// shipped config starts on every supported cluster, and one log line says
// which and why.
func withResolvedDefaults(ctx context.Context, profile string, args *config.DRAScopeArgs, taintRules *taintRulesCheck) *config.DRAScopeArgs {
	if args.DeviceHealth.Policy != "" {
		return args
	}
	resolved := *args
	resolved.DeviceHealth.Policy = args.DeviceHealth.Policy.Resolve(taintRules.ok)
	why := "DeviceTaintRules can be written"
	if !taintRules.ok {
		why = taintRules.why + ", so DeviceTaintRules cannot be written; set deviceHealth.policy to silence this"
	}
	klog.FromContext(ctx).Info("deviceHealth.policy is not set; using "+string(resolved.DeviceHealth.Policy), "profile", profile, "reason", why)
	return &resolved
}

// start builds the caches, wires them to each other and to the scheduler's
// informers, and starts their goroutines, one part at a time. The health
// cache and the side cache need each other: the side cache counts
// Unhealthy devices as unavailable, and the health cache believes reports
// only about drivers that publish slices. The runtime's own methods join
// them, so that neither package knows the other. Nothing runs before the
// scheduler starts the informers, so the parts may be wired in any order.
func (r *Runtime) start(ctx context.Context, h Handle, args *config.DRAScopeArgs) error {
	if args.DeviceHealth.Policy == config.DeviceHealthTaint && !r.taintRules.ok {
		if !r.taintRules.gateOn {
			return fmt.Errorf("deviceHealth.policy %s needs the DRADeviceTaintRules feature gate; enable it or choose %s",
				config.DeviceHealthTaint, config.DeviceHealthAvoid)
		}
		return fmt.Errorf("deviceHealth.policy %s needs DeviceTaintRules, but %s; choose %s",
			config.DeviceHealthTaint, r.taintRules.why, config.DeviceHealthAvoid)
	}
	r.informers = h.SharedInformerFactory()
	r.waiting = newWaitingPods(h, clock.RealClock{})
	if _, err := r.informers.Core().V1().Pods().Informer().AddEventHandler(r.waiting.handlers()); err != nil {
		return fmt.Errorf("pods waiting for a withheld or held device: %w", err)
	}
	r.holds = &releasehold.Holds{}
	r.holds.Start(ctx, releasehold.FromAPI(h.ClientSet()), r.holdFreed)
	if _, err := r.informers.Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj interface{}) {
			if claim, ok := obj.(*resourceapi.ResourceClaim); ok {
				r.holds.ViewChanged(claim, false)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if claim, ok := informerevents.Object[*resourceapi.ResourceClaim](obj); ok {
				r.holds.ViewChanged(claim, true)
			}
		},
	}); err != nil {
		return fmt.Errorf("release holds: %w", err)
	}
	if err := r.startSideCache(ctx, args); err != nil {
		return err
	}
	if err := r.startHealth(ctx, h, args); err != nil {
		return err
	}
	if err := r.startQuotas(ctx, h, drascopeAPIConfig(h, "devicequotas")); err != nil {
		return err
	}
	r.startConflictChecks(ctx, h)
	publisher, err := r.startPublisher(ctx, h, args)
	if err != nil {
		return err
	}
	if err := r.startMetrics(ctx, publisher); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Started the DRAScope runtime", "profile", h.ProfileName(),
		"publishResourcePools", args.PoolStatus.PublishResourcePools,
		"minPublishInterval", args.PoolStatus.MinPublishInterval.Duration,
		"maxWritesPerSecond", args.PoolStatus.MaxWritesPerSecond,
		"maxCreationsPerSecond", args.PoolStatus.MaxCreationsPerSecond,
		"maxPublishDelay", args.PoolStatus.MaxPublishDelay.Duration,
		"deviceHealthPolicy", args.DeviceHealth.Policy,
		"unhealthyHoldTime", args.DeviceHealth.UnhealthyHoldTime.Duration)
	return nil
}

// whileLeading runs fn in one of the runtime's goroutines once this process
// leads scheduling; never, when ctx ends first. What only one replica may
// write (DeviceTaintRules, ResourcePools, conflict reports) runs in it.
func (r *Runtime) whileLeading(ctx context.Context, fn func()) {
	r.goroutines.Go(func() {
		if closedBefore(ctx, r.leadership.Leading()) {
			fn()
		}
	})
}

// startSideCache builds the side cache of pool usage on the scheduler's
// informers. It follows DeviceTaintRules exactly when the scheduler's slice
// tracker does.
func (r *Runtime) startSideCache(ctx context.Context, args *config.DRAScopeArgs) error {
	r.pools = poolcache.New(poolcache.Options{
		Observe: metrics.ObserveRecompute,
		Usage: drausage.Options{
			Health:            r.deviceHealth,
			WithholdUnhealthy: args.DeviceHealth.Policy.Withholds(),
			HealthTaintKey:    health.TaintKey,
		},
	})
	synced, err := r.pools.AddInformerHandlers(r.informers, r.taintRules.gateOn)
	if err != nil {
		return fmt.Errorf("pool side cache: %w", err)
	}
	r.synced = synced
	r.goroutines.Go(func() { r.pools.Run(ctx) })

	// Until its informer has synced, the index lacks claims, and its
	// check sends every pod to the pass over every slice: nothing waits.
	r.index = nodeprune.NewIndex(nodeprune.IndexOptions{
		SharesApart: utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity),
		Observe:     metrics.ObservePruning,
	})
	index := r.index
	if _, err := r.informers.Resource().V1().ResourceClaims().Informer().AddEventHandler(informerevents.Handlers(index.SetClaim, index.DeleteClaim)); err != nil {
		return fmt.Errorf("node pruning index: watching ResourceClaims: %w", err)
	}
	return nil
}

// startHealth builds the device health cache on the scheduler's pod and
// claim informers and a watch of finished pods, and, where DeviceTaintRules
// are served, the writer that persists it (policy Taint) or deletes what
// Taint left (another policy), run by the leader once the cache holds what
// the rules persist.
func (r *Runtime) startHealth(ctx context.Context, h Handle, args *config.DRAScopeArgs) error {
	logger := klog.FromContext(ctx)
	r.healthRestored = make(chan struct{})
	claims := r.informers.Resource().V1().ResourceClaims().Lister()
	var writer *health.TaintWriter
	r.health = health.New(health.Options{
		HoldTime: args.DeviceHealth.UnhealthyHoldTime.Duration,
		Resolver: health.Resolver{
			KnownDriver: r.knownDriver,
			Claim: func(namespace, name string) (*resourceapi.ResourceClaim, error) {
				return claims.ResourceClaims(namespace).Get(name)
			},
		},
		DeviceExists: r.deviceExists,
		OnChange: func(devices []health.Device) {
			r.healthChanged(logger, devices)
			if writer != nil {
				writer.Enqueue(devices)
			}
		},
		OnIgnored: metrics.ObserveIgnored,
	})
	// Under another policy the writer only deletes what Taint left.
	persist := args.DeviceHealth.Policy == config.DeviceHealthTaint
	var rules cache.SharedIndexInformer
	if r.taintRules.gateOn {
		rules = r.informers.Resource().V1().DeviceTaintRules().Informer()
		var err error
		if writer, err = health.NewTaintWriter(r.health, h.ClientSet(), rules, persist); err != nil {
			return fmt.Errorf("DeviceTaintRules for Unhealthy devices: %w", err)
		}
		writer.ObserveWrite = metrics.ObserveRuleWrite
	}
	claimInformer := r.informers.Resource().V1().ResourceClaims().Informer()
	if err := r.health.AddClaimHandlers(logger, claimInformer); err != nil {
		return fmt.Errorf("device health: %w", err)
	}
	pods := r.informers.Core().V1().Pods().Informer()
	terminal, err := health.NewTerminalPodInformer(h.ClientSet())
	if err != nil {
		return err
	}
	r.goroutines.Go(func() { terminal.RunWithContext(ctx) })
	var persisted cache.SharedIndexInformer
	if persist {
		persisted = rules
	}
	r.goroutines.Go(func() { r.followHealth(ctx, persisted, claimInformer, pods, terminal) })
	r.goroutines.Go(func() { r.health.Run(ctx) })
	if writer == nil {
		return nil
	}
	r.whileLeading(ctx, func() {
		// Until the cache holds what the rules persist, it would delete
		// them all.
		if !closedBefore(ctx, r.healthRestored) {
			return
		}
		if persist {
			// What the previous leader persisted and this process missed
			// (it may have started after a pod failed, when the pod's
			// claims were already released).
			for _, obj := range rules.GetStore().List() {
				if rule, ok := obj.(*resourceapi.DeviceTaintRule); ok {
					r.health.Adopt(logger, rule)
				}
			}
		}
		writer.Run(ctx)
	})
	return nil
}

// startConflictChecks makes the leader confirm the conflicts the side cache
// suspects and report them (metric, event, ResourcePool status), whether or
// not it publishes ResourcePools.
func (r *Runtime) startConflictChecks(ctx context.Context, h Handle) {
	checker := conflictcheck.New(r.pools, conflictcheck.FromAPI(h.ClientSet()), conflictcheck.Options{
		Report:  conflictEvents(h.EventRecorder(), r.informers),
		Observe: metrics.ObserveConflictCheck,
	})
	r.whileLeading(ctx, func() { checker.Run(ctx) })
}

// drascopeAPIConfig is the client config for drascope.dev's resources,
// named by what uses it.
func drascopeAPIConfig(h Handle, userAgent string) *restclient.Config {
	// The scheduler's client config asks for protobuf, which a custom
	// resource does not speak.
	config := restclient.AddUserAgent(restclient.CopyConfig(h.KubeConfig()), userAgent)
	config.ContentType, config.AcceptContentTypes = "application/json", "application/json"
	// One budget for the scheduling path: the ResourcePool writes take
	// their tokens from the scheduler client's limiter
	// (clientConnection.qps and burst, or --kube-api-qps and
	// --kube-api-burst), which binding, claim status, taints and hold
	// checks already share. A client of its own would let the process send
	// twice the configured rate.
	config.RateLimiter = sharedRateLimiter(h.ClientSet(), config.RateLimiter)
	return config
}

// startPublisher makes the leader publish ResourcePools, or, with
// publishing off, delete those an earlier configuration left. The process
// leading scheduling publishes: its in-flight view is the authoritative
// one, a new leader publishes as soon as it schedules, and a standby (which
// under delayCacheUntilActive has no informers) never does. kube-scheduler
// exits when it stops leading, so there is one term per process. It returns
// the publisher, nil when publishing is off.
func (r *Runtime) startPublisher(ctx context.Context, h Handle, args *config.DRAScopeArgs) (*poolpublisher.Publisher, error) {
	logger := klog.FromContext(ctx)
	poolClient, err := versioned.NewForConfig(drascopeAPIConfig(h, "resourcepools"))
	if err != nil {
		return nil, fmt.Errorf("ResourcePool client: %w", err)
	}
	if !args.PoolStatus.PublishResourcePools {
		logger.Info("Not publishing ResourcePool objects: poolStatus.publishResourcePools is false")
		r.whileLeading(ctx, func() { poolpublisher.Withdraw(ctx, poolClient) })
		return nil, nil
	}
	publisher := poolpublisher.New(r.pools, poolClient, poolpublisher.Options{
		MinInterval:           args.PoolStatus.MinPublishInterval.Duration,
		MaxWritesPerSecond:    args.PoolStatus.MaxWritesPerSecond,
		MaxCreationsPerSecond: args.PoolStatus.MaxCreationsPerSecond,
		MaxDelay:              args.PoolStatus.MaxPublishDelay.Duration,
		DeviceHealthPolicy:    string(args.DeviceHealth.Policy),
		Synced:                r.synced,
		Observe:               metrics.ObserveSync,
		ObservePublished:      metrics.ObservePublished,
		ObserveWrite:          metrics.ObserveWrite,
		ObserveOverBudget:     metrics.ObserveDueWrite,
		ObserveWriteFloor:     metrics.ObserveWriteFloor,
	})
	r.publisher = publisher
	r.whileLeading(ctx, func() {
		logger.Info("Publishing ResourcePools: this replica leads scheduling")
		publisher.Run(ctx)
	})
	return publisher, nil
}

// startMetrics exports the pools' and the health cache's metrics until ctx
// ends.
func (r *Runtime) startMetrics(ctx context.Context, publisher *poolpublisher.Publisher) error {
	pods := newPodsWithClaims()
	podInformer := r.informers.Core().V1().Pods().Informer()
	registration, err := podInformer.AddEventHandler(informerevents.Handlers(pods.set, pods.remove))
	if err != nil {
		return fmt.Errorf("following pods for the metrics: %w", err)
	}
	stopExport := metrics.Export(&metricsSource{
		Cache:     r.pools,
		r:         r,
		pods:      pods,
		claims:    r.informers.Resource().V1().ResourceClaims().Lister(),
		classes:   r.informers.Resource().V1().DeviceClasses().Lister(),
		publisher: publisher,
	})
	r.goroutines.Go(func() {
		<-ctx.Done()
		stopExport()
		_ = podInformer.RemoveEventHandler(registration)
	})
	return nil
}

// profileNames are the profiles that joined so far.
func (r *Runtime) profileNames() sets.Set[string] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.profiles.Clone()
}

// closedBefore waits until ch is closed, and reports whether that happened
// before ctx ended.
func closedBefore(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}

// Wait returns once every goroutine the runtime started has ended, which
// they do when the context it started with ends.
func (r *Runtime) Wait() {
	r.goroutines.Wait()
}

// Pools is the side cache; nil before the runtime starts.
func (r *Runtime) Pools() *poolcache.Cache {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pools
}

// Index is node pruning's availability index; nil before the runtime
// starts.
func (r *Runtime) Index() *nodeprune.Index {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.index
}

// Holds are the release holds every profile's allocator honours; nil
// before the runtime starts.
func (r *Runtime) Holds() *releasehold.Holds {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holds
}

// StateSizes returns how many entries each of the runtime's long-lived maps
// holds, by name: the side cache's, node pruning's index's, the health
// cache's, the release holds', the waiting pods' and the publisher's current
// term's. Each follows what exists (slices, claims, pods, pools) or what is
// younger than its time to live, never what ever existed; the churn soak
// checks it.
func (r *Runtime) StateSizes() map[string]int {
	r.mu.Lock()
	pools, index, healthCache, holds, waiting, publisher := r.pools, r.index, r.health, r.holds, r.waiting, r.publisher
	r.mu.Unlock()
	sizes := map[string]int{}
	if pools == nil {
		return sizes
	}
	maps.Copy(sizes, pools.Sizes())
	maps.Copy(sizes, index.Sizes())
	if healthCache != nil {
		maps.Copy(sizes, healthCache.Sizes())
	}
	sizes["releasehold_released"], sizes["releasehold_held"] = holds.Sizes()
	if waiting != nil {
		sizes["waiting_pods"] = waiting.len()
	}
	if publisher != nil {
		maps.Copy(sizes, publisher.Sizes())
	}
	return sizes
}

// Health is the device health cache; nil before the runtime starts.
func (r *Runtime) Health() *health.Cache {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.health
}

// Withholds reports whether the scheduler withholds Unhealthy devices
// (deviceHealth.policy Taint or Avoid).
func (r *Runtime) Withholds() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first != nil && r.first.args.DeviceHealth.Policy.Withholds()
}

// RetryWhenDevicesFree remembers a pod to retry when devices come free
// without an API event to say so, which upstream's queueing hints would
// need: a withheld device that is no longer Unhealthy (healthChanged), or
// a release hold that ends (holdFreed), such as a released allocation found
// never written, whose claim does not change. Without it such a pod waits
// for the queue's flush (five minutes).
func (r *Runtime) RetryWhenDevicesFree(pod *v1.Pod) {
	r.waiting.add(pod)
}

// ForgetWaitingPod forgets a pod remembered by RetryWhenDevicesFree:
// Unreserve calls it when the pod's scheduling was undone after Reserve. The pod retries with upstream's
// backoff, and remembering it would let every hold that ends pull it out
// of that backoff: pods whose writes keep failing would retry each other
// without pause.
func (r *Runtime) ForgetWaitingPod(pod *v1.Pod) {
	r.waiting.remove(pod.UID)
}

// holdFreed retries the waiting pods when a release hold ends.
func (r *Runtime) holdFreed(logger klog.Logger) {
	r.waiting.activate(logger, "A released allocation's devices are free again, retrying the pods that waited for one")
}

// deviceHealth is the health cache's report in the form the counting rules
// ask for it.
func (r *Runtime) deviceHealth(pool drausage.PoolID, device string) drausage.DeviceHealth {
	report, ok := r.health.Get(health.Device{Driver: pool.Driver, Pool: pool.Pool, Name: device})
	if !ok {
		return drausage.DeviceHealth{}
	}
	return drausage.DeviceHealth{Status: report.Health, Detail: report.Detail()}
}

// followHealth feeds the health cache in an order that makes restarts
// exact: first the rules drascope persisted (under policy Taint; they name
// the pods believed without a claim check), then, once the claims are
// known, every pod, running and finished; once all that existed at start
// were seen, restored reporters that no pod confirmed are gone and their
// hold time starts.
func (r *Runtime) followHealth(ctx context.Context, persisted, claims, pods, terminal cache.SharedIndexInformer) {
	logger := klog.FromContext(ctx)
	if persisted != nil {
		if !cache.WaitForCacheSync(ctx.Done(), persisted.HasSynced) {
			return
		}
		for _, obj := range persisted.GetStore().List() {
			if rule, ok := obj.(*resourceapi.DeviceTaintRule); ok {
				r.health.Restore(logger, rule)
			}
		}
	}
	close(r.healthRestored)
	// A running pod judged before its claims are known would not be
	// believed, and kubelet writes its status again only on change.
	if !cache.WaitForCacheSync(ctx.Done(), claims.HasSynced) {
		return
	}
	registrations, err := r.health.AddPodHandlers(logger, pods, terminal)
	if err != nil {
		logger.Error(err, "Device health from pod status is off: cannot watch pods")
		return
	}
	if !cache.WaitForCacheSync(ctx.Done(), registrations...) {
		return
	}
	r.health.Settle(logger)
	logger.V(2).Info("Device health has seen every pod, running and finished")
}

// deviceExists says whether a device is in a slice the side cache holds;
// until the slice informer has synced, every device does.
func (r *Runtime) deviceExists(d health.Device) bool {
	if !r.synced() {
		return true
	}
	snap := r.pools.Get(drausage.PoolID{Driver: d.Driver, Pool: d.Pool})
	if snap == nil {
		return false
	}
	_, found := slices.BinarySearchFunc(snap.Devices, d.Name, func(u drausage.DeviceUsage, name string) int {
		return strings.Compare(u.Name, name)
	})
	return found
}

// knownDriver says whether health reports about a driver are believed: once
// the side cache holds a slice of it. Until the slice informer has synced,
// every driver is, so that reports seen first at start-up are not dropped.
func (r *Runtime) knownDriver(driver string) bool {
	return !r.synced() || r.pools.HasDriver(driver)
}

// healthChanged refreshes the pools of devices whose health changed and
// retries the pods refused while a device was withheld, when one is no
// longer Unhealthy: a Healthy report or the end of its hold time. Retrying
// here, after the health cache has the change, rather than only from a
// queueing hint, means the retry always sees it.
func (r *Runtime) healthChanged(logger klog.Logger, devices []health.Device) {
	pools := make([]drausage.PoolID, 0, len(devices))
	recovered := false
	for _, d := range devices {
		pools = append(pools, drausage.PoolID{Driver: d.Driver, Pool: d.Pool})
		if report, _ := r.health.Get(d); report.Health != v1.ResourceHealthStatusUnhealthy {
			recovered = true
		}
	}
	r.pools.Invalidate(pools...)
	if recovered {
		r.waiting.activate(logger, "A withheld device is no longer Unhealthy, retrying the pods that waited for one")
	}
}

// maxEventNote is the longest note the apiserver accepts (events.k8s.io).
const maxEventNote = 1024

// conflictEvents records Warning events on each ResourceSlice of a pool in
// which claims over-use devices or shared counters: one per kind of
// conflict (the event's action), since events of one object, reason and
// action form one series whose note is the first one's.
func conflictEvents(recorder events.EventRecorderLogger, factory informers.SharedInformerFactory) func(context.Context, drausage.PoolID, []drausage.Conflict) {
	slices := factory.Resource().V1().ResourceSlices().Lister()
	return func(ctx context.Context, pool drausage.PoolID, conflicts []drausage.Conflict) {
		all, err := slices.List(labels.Everything())
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing ResourceSlices for a conflict event", "pool", pool)
			return
		}
		byKind := map[drausage.ConflictKind][]string{}
		for _, c := range conflicts {
			byKind[c.Kind] = append(byKind[c.Kind], c.Message)
		}
		for kind, messages := range byKind {
			note := fmt.Sprintf("%d %s conflict(s) confirmed from the API: %s", len(messages), kind, strings.Join(messages[:min(len(messages), 3)], "; "))
			if len(messages) > 3 {
				note += "; ..."
			}
			note += "; two schedulers may have allocated at once (see README: Deployment modes)"
			if len(note) > maxEventNote {
				note = strings.ToValidUTF8(note[:maxEventNote-3], "") + "..."
			}
			for _, slice := range all {
				if slice.Spec.Driver == pool.Driver && slice.Spec.Pool.Name == pool.Pool {
					recorder.Eventf(slice, nil, v1.EventTypeWarning, "DeviceAllocationConflict", string(kind), "%s", note)
				}
			}
		}
	}
}

// sharedRateLimiter is the rate limiter of the scheduler's client, which
// every API group of a clientset shares, or fallback when the client has
// none (a fake in a unit test).
func sharedRateLimiter(client kubernetes.Interface, fallback flowcontrol.RateLimiter) flowcontrol.RateLimiter {
	if limiter := client.CoreV1().RESTClient().GetRateLimiter(); limiter != nil {
		return limiter
	}
	return fallback
}
