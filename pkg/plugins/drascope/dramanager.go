package drascope

import (
	fwk "k8s.io/kube-scheduler/framework"
)

// decoratedHandle is the framework.Handle that upstream's DynamicResources
// plugin receives: the scheduler's own handle, except that SharedDRAManager
// returns drascope's decorator. This is the one seam through which drascope
// sees, and may add to, what the allocator treats as in use.
type decoratedHandle struct {
	fwk.Handle
	draManager fwk.SharedDRAManager
}

func (h *decoratedHandle) SharedDRAManager() fwk.SharedDRAManager {
	return h.draManager
}

// draManager decorates the scheduler's SharedDRAManager. It is shared by
// nothing but this profile's plugin instance; the manager it wraps is shared
// by every profile, so in-flight allocations of one profile are seen by the
// others and no device is handed out twice within one scheduler process.
//
// Today it forwards everything. The pool availability and device health
// features hook in here: observing in-flight allocations (to mark pools
// dirty) and adding devices that must not be handed out.
type draManager struct {
	fwk.SharedDRAManager
}

func newDRAManager(inner fwk.SharedDRAManager) *draManager {
	return &draManager{SharedDRAManager: inner}
}
