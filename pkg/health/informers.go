package health

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// AddPodHandlers feeds the cache from a pod informer. In the scheduler this
// is the informer it runs anyway, so this adds no watch. Deleted pods are
// not forgotten: their reports stay until a newer one or the hold time.
func (c *Cache) AddPodHandlers(logger klog.Logger, pods cache.SharedInformer) (cache.ResourceEventHandlerRegistration, error) {
	return pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if pod, ok := obj.(*v1.Pod); ok {
				c.ObservePod(logger, nil, pod)
			}
		},
		UpdateFunc: func(oldObj, newObj interface{}) {
			old, _ := oldObj.(*v1.Pod)
			pod, ok := newObj.(*v1.Pod)
			if ok {
				c.ObservePod(logger, old, pod)
			}
		},
	})
}
