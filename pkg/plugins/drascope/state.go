package drascope

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
	"github.com/drascope/drascope/pkg/poolmetrics"
	"github.com/drascope/drascope/pkg/poolpublisher"
)

// One side cache (and publisher) per scheduler, shared by every profile that
// runs DRAScope: pools are cluster-wide, and each profile's plugin instance
// reports its in-flight allocations to the same cache. A scheduler is
// identified by its informer factory.
var (
	poolCachesMu sync.Mutex
	poolCaches   = map[informers.SharedInformerFactory]*poolcache.Cache{}
)

// poolCacheFor returns the scheduler's side cache, starting it (and the
// publisher, when enabled) on first use. With several DRAScope profiles, the
// poolStatus args of the first one built apply.
func poolCacheFor(ctx context.Context, fh fwk.Handle, args *config.DRAScopeArgs) (*poolcache.Cache, error) {
	poolCachesMu.Lock()
	defer poolCachesMu.Unlock()
	factory := fh.SharedInformerFactory()
	if c, ok := poolCaches[factory]; ok {
		return c, nil
	}
	logger := klog.FromContext(ctx)
	cache := poolcache.New(poolcache.Options{Observe: poolmetrics.ObserveRecompute})
	// Follow DeviceTaintRules exactly when the scheduler's slice tracker does.
	synced, err := cache.AddInformerHandlers(factory, utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules))
	if err != nil {
		return nil, fmt.Errorf("%s: pool side cache: %w", Name, err)
	}
	poolmetrics.Register(cache)
	go cache.Run(ctx)

	if args.PoolStatus.PublishResourcePools {
		client, err := dynamic.NewForConfig(fh.KubeConfig())
		if err != nil {
			return nil, fmt.Errorf("%s: ResourcePool client: %w", Name, err)
		}
		publisher := poolpublisher.New(cache, client, poolpublisher.Options{
			MinInterval:      args.PoolStatus.MinPublishInterval.Duration,
			Synced:           synced,
			Observe:          poolmetrics.ObserveSync,
			ObservePublished: poolmetrics.ObservePublished,
			ReportConflict:   conflictEvents(fh, factory),
		})
		if err := poolpublisher.RunWhileLeading(ctx, fh.ClientSet(), publisher.Run); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	} else {
		logger.Info("Not publishing ResourcePool objects: poolStatus.publishResourcePools is false")
	}
	poolCaches[factory] = cache
	go func() {
		<-ctx.Done()
		poolCachesMu.Lock()
		delete(poolCaches, factory)
		poolCachesMu.Unlock()
	}()
	return cache, nil
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
