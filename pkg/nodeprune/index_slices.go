package nodeprune

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// sliceKey identifies a slice: by UID and resource version, or by object
// when it has no UID (slices built by hand).
type sliceKey struct {
	uid     types.UID
	version string
	object  *resourceapi.ResourceSlice
}

func keyOf(slice *resourceapi.ResourceSlice) sliceKey {
	if slice.UID == "" {
		return sliceKey{object: slice}
	}
	return sliceKey{uid: slice.UID, version: slice.ResourceVersion}
}

type sliceEntry struct {
	key sliceKey
	// slice is the object the entry was made from, object the one last
	// listed for it.
	slice, object *resourceapi.ResourceSlice
	ids           []structured.DeviceID
	// used counts the devices (by position) held.
	used int
	// node is the node of a node-local slice, "" for a walked one.
	node string
	pass uint64
}

func (e *sliceEntry) free() bool { return e.used < len(e.ids) }

// countLocked changes a slice's count of held devices, and its node's
// count of free slices when the slice fills up or frees up.
func (x *Index) countLocked(e *sliceEntry, delta int) {
	wasFree := e.free()
	e.used += delta
	if e.node != "" && wasFree != e.free() {
		x.freeSliceLocked(e, e.free())
	}
}

func (x *Index) freeSliceLocked(e *sliceEntry, free bool) {
	driver := e.slice.Spec.Driver
	nodes := x.freeOn[driver]
	if free {
		if nodes == nil {
			nodes = map[string]int{}
			x.freeOn[driver] = nodes
		}
		nodes[e.node]++
		return
	}
	if nodes[e.node]--; nodes[e.node] <= 0 {
		delete(nodes, e.node)
	}
}

// syncSlicesLocked makes the index's slices the cycle's: new objects are
// indexed, those the cycle did not list are dropped.
func (x *Index) syncSlicesLocked(slices []*resourceapi.ResourceSlice) {
	x.pass++
	listed := 0
	for _, slice := range slices {
		e := x.byObject[slice]
		if e == nil {
			key := keyOf(slice)
			if e = x.slices[key]; e != nil {
				// Another copy of a slice the index has.
				delete(x.byObject, e.object)
				e.object = slice
				x.byObject[slice] = e
			} else {
				e = x.addSliceLocked(key, slice)
			}
		}
		if e.pass != x.pass {
			e.pass = x.pass
			listed++
		}
	}
	if listed == len(x.slices) {
		return
	}
	for _, e := range x.slices {
		if e.pass != x.pass {
			x.removeSliceLocked(e)
		}
	}
}

func (x *Index) addSliceLocked(key sliceKey, slice *resourceapi.ResourceSlice) *sliceEntry {
	e := &sliceEntry{key: key, slice: slice, object: slice, ids: makeIDs(slice)}
	perDevice := ptr.Deref(slice.Spec.PerDeviceNodeSelection, false)
	if !perDevice && ptr.Deref(slice.Spec.NodeName, "") != "" {
		e.node = *slice.Spec.NodeName
	} else {
		x.walked.Insert(e)
	}
	for _, id := range e.ids {
		x.byDevice[id] = append(x.byDevice[id], e)
		if x.isHeld(id) {
			e.used++
		}
	}
	if e.node != "" && e.free() {
		x.freeSliceLocked(e, true)
	}
	x.slices[key] = e
	x.byObject[slice] = e
	return e
}

func (x *Index) removeSliceLocked(e *sliceEntry) {
	if e.node != "" && e.free() {
		x.freeSliceLocked(e, false)
	}
	x.walked.Delete(e)
	for _, id := range e.ids {
		entries := x.byDevice[id]
		for i, other := range entries {
			if other == e {
				entries = append(entries[:i], entries[i+1:]...)
				break
			}
		}
		if len(entries) == 0 {
			delete(x.byDevice, id)
		} else {
			x.byDevice[id] = entries
		}
	}
	delete(x.slices, e.key)
	delete(x.byObject, e.object)
}
