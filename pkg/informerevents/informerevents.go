// Package informerevents turns an informer's untyped events into typed
// calls. A delete can carry a cache.DeletedFinalStateUnknown tombstone
// instead of the object (the watch missed the delete and a relist found
// the object gone); every handler must unwrap it, and this is the one
// place that does.
package informerevents

import "k8s.io/client-go/tools/cache"

// Object returns the informer event's object as T, unwrapping a delete's
// tombstone; false when it is not a T.
func Object[T any](obj any) (T, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	o, ok := obj.(T)
	return o, ok
}

// Handlers calls set for every added or updated T and del for every
// deleted one; events of other types are dropped.
func Handlers[T any](set, del func(T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		DeleteFunc: func(obj any) {
			if o, ok := Object[T](obj); ok {
				del(o)
			}
		},
	}
}
