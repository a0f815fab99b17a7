package poolcache

import (
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/drascope/drascope/pkg/informerevents"
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
	if err := add("ResourceSlices", resource.ResourceSlices().Informer(), informerevents.Handlers(c.SetSlice, c.DeleteSlice)); err != nil {
		return nil, err
	}
	if err := add("ResourceClaims", resource.ResourceClaims().Informer(), informerevents.Handlers(c.SetClaim, c.DeleteClaim)); err != nil {
		return nil, err
	}
	if withTaintRules {
		if err := add("DeviceTaintRules", resource.DeviceTaintRules().Informer(), informerevents.Handlers(c.SetDeviceTaintRule, c.DeleteDeviceTaintRule)); err != nil {
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
