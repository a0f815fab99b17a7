package nodeprune

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	draapi "k8s.io/dynamic-resource-allocation/api"
	"k8s.io/dynamic-resource-allocation/structured"
)

// DeviceIDs caches the allocator's interned IDs of each slice's devices, so
// that pruning does not intern three names per device for every pod:
// interning is a hash-map lookup each, and on a full cluster pruning passes
// every device of every slice. A slice is an immutable object (an update is
// a new one), so its IDs never change; entries of slices no longer passed
// are dropped once they outnumber those in use. A pass holds the lock from
// begin to end, so a slice costs a map lookup and no lock of its own;
// passes (one per scheduling cycle) run one at a time anyway. The zero
// value is ready.
type DeviceIDs struct {
	mu      sync.Mutex
	bySlice map[*resourceapi.ResourceSlice]*sliceIDs
	// calls counts the passes; an entry remembers the last that used it.
	calls uint64
	used  int
}

type sliceIDs struct {
	ids      []structured.DeviceID
	lastCall uint64
}

// begin starts a pass; end must follow.
func (c *DeviceIDs) begin() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.calls++
	c.used = 0
}

// of returns the IDs of the slice's devices, in order, within a pass.
func (c *DeviceIDs) of(slice *resourceapi.ResourceSlice) []structured.DeviceID {
	if c == nil {
		return makeIDs(slice)
	}
	if c.bySlice == nil {
		c.bySlice = map[*resourceapi.ResourceSlice]*sliceIDs{}
	}
	e := c.bySlice[slice]
	if e == nil {
		e = &sliceIDs{ids: makeIDs(slice)}
		c.bySlice[slice] = e
	}
	if e.lastCall != c.calls {
		e.lastCall = c.calls
		c.used++
	}
	return e.ids
}

// end finishes a pass, dropping the entries it did not use once they are
// more than those it did.
func (c *DeviceIDs) end() {
	if c == nil {
		return
	}
	defer c.mu.Unlock()
	if len(c.bySlice) <= 2*c.used+16 {
		return
	}
	for slice, e := range c.bySlice {
		if e.lastCall != c.calls {
			delete(c.bySlice, slice)
		}
	}
}

// Len is the number of slices cached, for tests.
func (c *DeviceIDs) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bySlice)
}

// makeIDs interns the slice's driver and pool once, and each device name.
func makeIDs(slice *resourceapi.ResourceSlice) []structured.DeviceID {
	driver, pool := draapi.MakeUniqueString(slice.Spec.Driver), draapi.MakeUniqueString(slice.Spec.Pool.Name)
	ids := make([]structured.DeviceID, len(slice.Spec.Devices))
	for i := range slice.Spec.Devices {
		ids[i] = structured.DeviceID{Driver: driver, Pool: pool, Device: draapi.MakeUniqueString(slice.Spec.Devices[i].Name)}
	}
	return ids
}
