package drascope

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolmetrics"
	"github.com/drascope/drascope/pkg/poolpublisher"
)

// schedulerState is what every DRAScope profile of one scheduler shares:
// pools and device health are cluster-wide, and each profile's plugin
// instance reports its in-flight allocations to the same side cache. A
// scheduler is identified by its informer factory.
type schedulerState struct {
	pools   *poolcache.Cache
	health  *health.Cache
	waiting *waitingPods
}

var (
	statesMu sync.Mutex
	states   = map[informers.SharedInformerFactory]*schedulerState{}
)

// stateFor returns the scheduler's shared state, starting the health cache,
// the side cache and the publisher (when enabled) on first use. With several
// DRAScope profiles, the poolStatus and deviceHealth args of the first one
// built apply to them; each profile applies its own deviceHealth.policy to
// allocation.
func stateFor(ctx context.Context, fh fwk.Handle, args *config.DRAScopeArgs) (*schedulerState, error) {
	statesMu.Lock()
	defer statesMu.Unlock()
	factory := fh.SharedInformerFactory()
	if s, ok := states[factory]; ok {
		return s, nil
	}
	logger := klog.FromContext(ctx)
	state := &schedulerState{waiting: newWaitingPods(fh)}
	state.health = health.New(health.Options{
		HoldTime: args.DeviceHealth.UnhealthyHoldTime.Duration,
		OnChange: func(devices []health.Device) { state.healthChanged(logger, devices) },
	})
	cache := poolcache.New(poolcache.Options{
		Observe: poolmetrics.ObserveRecompute,
		Usage: drausage.Options{
			Health:            state.health.DeviceHealth,
			WithholdUnhealthy: args.DeviceHealth.Policy == config.DeviceHealthAvoid,
		},
	})
	state.pools = cache
	// Follow DeviceTaintRules exactly when the scheduler's slice tracker does.
	synced, err := cache.AddInformerHandlers(factory, utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules))
	if err != nil {
		return nil, fmt.Errorf("%s: pool side cache: %w", Name, err)
	}
	state.health.SetResolver(resolverFor(factory, cache, synced))
	if _, err := state.health.AddPodHandlers(logger, factory.Core().V1().Pods().Informer()); err != nil {
		return nil, fmt.Errorf("%s: device health from pod status: %w", Name, err)
	}
	poolmetrics.Register(cache)
	go cache.Run(ctx)
	go state.health.Run(ctx)

	if args.PoolStatus.PublishResourcePools {
		client, err := dynamic.NewForConfig(fh.KubeConfig())
		if err != nil {
			return nil, fmt.Errorf("%s: ResourcePool client: %w", Name, err)
		}
		publisher := poolpublisher.New(cache, client, poolpublisher.Options{
			MinInterval:        args.PoolStatus.MinPublishInterval.Duration,
			MaxWritesPerSecond: args.PoolStatus.MaxWritesPerSecond,
			Synced:             synced,
			Observe:            poolmetrics.ObserveSync,
			ObservePublished:   poolmetrics.ObservePublished,
			ObserveWrite:       poolmetrics.ObserveWrite,
			ReportConflict:     conflictEvents(fh, factory),
		})
		if err := poolpublisher.RunWhileLeading(ctx, fh.ClientSet(), publisher.Run); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	} else {
		logger.Info("Not publishing ResourcePool objects: poolStatus.publishResourcePools is false")
	}
	states[factory] = state
	go func() {
		<-ctx.Done()
		statesMu.Lock()
		delete(states, factory)
		statesMu.Unlock()
	}()
	return state, nil
}

// resolverFor resolves health reports with the scheduler's own caches. A
// driver counts as known once the side cache holds a slice of it; until the
// slice informer has synced, every driver does, so that reports seen first
// at start-up are not dropped.
func resolverFor(factory informers.SharedInformerFactory, pools *poolcache.Cache, synced func() bool) health.Resolver {
	claims := factory.Resource().V1().ResourceClaims().Lister()
	return health.Resolver{
		KnownDriver: func(driver string) bool {
			return !synced() || pools.HasDriver(driver)
		},
		Claim: func(namespace, name string) (*resourceapi.ResourceClaim, error) {
			return claims.ResourceClaims(namespace).Get(name)
		},
	}
}

// healthChanged refreshes the pools of devices whose health changed and
// retries the pods refused while a device was withheld, when one is no
// longer Unhealthy: a Healthy report or the end of its hold time. Retrying
// here, after the health cache has the change, rather than only from a
// queueing hint, means the retry always sees it.
func (s *schedulerState) healthChanged(logger klog.Logger, devices []health.Device) {
	pools := make([]drausage.PoolID, 0, len(devices))
	recovered := false
	for _, d := range devices {
		pools = append(pools, drausage.PoolID{Driver: d.Driver, Pool: d.Pool})
		if r, _ := s.health.Get(d); r.Health != v1.ResourceHealthStatusUnhealthy {
			recovered = true
		}
	}
	s.pools.Invalidate(pools...)
	if recovered {
		s.waiting.activate(logger)
	}
}

// conflictEvents records a Warning event on each ResourceSlice of a pool in
// which a device is held by more claims than it allows.
func conflictEvents(fh fwk.Handle, factory informers.SharedInformerFactory) poolpublisher.ConflictReporter {
	slices := factory.Resource().V1().ResourceSlices().Lister()
	return func(ctx context.Context, pool drausage.PoolID, message string) {
		all, err := slices.List(labels.Everything())
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing ResourceSlices for a conflict event", "pool", pool)
			return
		}
		for _, slice := range all {
			if slice.Spec.Driver == pool.Driver && slice.Spec.Pool.Name == pool.Pool {
				fh.EventRecorder().Eventf(slice, nil, v1.EventTypeWarning, "DeviceAllocationConflict", "Validate",
					"%s; two schedulers may have allocated it at once (see README: Deployment modes)", message)
			}
		}
	}
}
