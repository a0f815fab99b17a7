package poolcache

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// AddInformerHandlers feeds the cache from a shared informer factory. In the
// scheduler these are informers it runs anyway, so this adds no watch.
// DeviceTaintRules are followed only when withTaintRules is set (the
// DRADeviceTaintRules gate). The returned function reports whether the cache
// has received every object that existed when the informers started.
func (c *Cache) AddInformerHandlers(factory informers.SharedInformerFactory, withTaintRules bool) (synced func() bool, err error) {
	resource := factory.Resource().V1()
	var registrations []cache.ResourceEventHandlerRegistration
	add := func(what string, informer cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		r, err := informer.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("watching %s: %w", what, err)
		}
		registrations = append(registrations, r)
		return nil
	}
	if err := add("ResourceSlices", resource.ResourceSlices().Informer(), handlers(c.SetSlice, c.DeleteSlice)); err != nil {
		return nil, err
	}
	if err := add("ResourceClaims", resource.ResourceClaims().Informer(), handlers(c.SetClaim, c.DeleteClaim)); err != nil {
		return nil, err
	}
	if withTaintRules {
		if err := add("DeviceTaintRules", resource.DeviceTaintRules().Informer(), handlers(c.SetDeviceTaintRule, c.DeleteDeviceTaintRule)); err != nil {
			return nil, err
		}
	}
	return func() bool {
		for _, r := range registrations {
			if !r.HasSynced() {
				return false
			}
		}
		return true
	}, nil
}

// handlers adapts typed set and delete functions to informer callbacks,
// unwrapping the tombstones of deletes the informer missed.
func handlers[T interface {
	*resourceapi.ResourceSlice | *resourceapi.ResourceClaim | *resourceapi.DeviceTaintRule
}](set, del func(T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if o, ok := obj.(T); ok {
				del(o)
			}
		},
	}
}
