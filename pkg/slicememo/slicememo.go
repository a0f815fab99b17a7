// Package slicememo remembers a value computed from a ResourceSlice for as
// long as that slice object keeps being passed. A slice is an immutable
// object (an update is a new one), so the value never goes stale, and a pass
// over every slice of the cluster, once per scheduling cycle, pays a map
// lookup per slice instead of a walk over its devices.
package slicememo

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
)

// Memo holds one value per slice object. A pass holds the lock from Begin to
// End, so a slice costs a map lookup and no lock of its own; entries of
// slices a pass did not use are dropped once they outnumber those it did.
// The zero value is ready; a nil Memo computes every value anew.
type Memo[T any] struct {
	mu      sync.Mutex
	bySlice map[*resourceapi.ResourceSlice]*entry[T]
	// passes counts the passes; an entry remembers the last that used it.
	passes uint64
	used   int
}

type entry[T any] struct {
	value    T
	lastPass uint64
}

// Begin starts a pass; End must follow.
func (m *Memo[T]) Begin() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.passes++
	m.used = 0
}

// Of returns compute(slice), computed once per slice object, within a pass.
func (m *Memo[T]) Of(slice *resourceapi.ResourceSlice, compute func(*resourceapi.ResourceSlice) T) T {
	if m == nil {
		return compute(slice)
	}
	if m.bySlice == nil {
		m.bySlice = map[*resourceapi.ResourceSlice]*entry[T]{}
	}
	e := m.bySlice[slice]
	if e == nil {
		e = &entry[T]{value: compute(slice)}
		m.bySlice[slice] = e
	}
	if e.lastPass != m.passes {
		e.lastPass = m.passes
		m.used++
	}
	return e.value
}

// End finishes a pass, dropping the entries it did not use once they are
// more than those it did.
func (m *Memo[T]) End() {
	if m == nil {
		return
	}
	defer m.mu.Unlock()
	if len(m.bySlice) <= 2*m.used+16 {
		return
	}
	for slice, e := range m.bySlice {
		if e.lastPass != m.passes {
			delete(m.bySlice, slice)
		}
	}
}

// Len is the number of slices remembered, for tests.
func (m *Memo[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.bySlice)
}
