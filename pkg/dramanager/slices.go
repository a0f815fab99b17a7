package dramanager

import (
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/adminaccess"
	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/gangplan"
	"github.com/drascope/drascope/pkg/gangpreempt"
)

// ResourceSlices is what upstream's PreFilter lists slices through.
func (m *Manager) ResourceSlices() fwk.ResourceSliceLister {
	return listedSlices{ResourceSliceLister: m.SharedDRAManager.ResourceSlices(), served: &m.served, ignore: &m.countersIgnored, capture: &m.capture, bestFit: m.bestFit, steering: &m.steering, freeing: &m.claims.freeing}
}

// listedSlices lists the scheduler's slices as upstream's allocator gets
// them (or, while pruning first serves upstream's PreFilter, the slices it
// serves: Serve), in four steps: with bestFit, each slice's devices in
// BestFit order (bestfit.go); in a gang's preemption dry run, the
// victims' devices after the others (pkg/gangpreempt); while steering,
// only the free devices a gang plan allows (pkg/gangplan) and a
// DeviceQuota does not hide (Hide); while ignore is
// set, every device consuming zero of each counter (pkg/adminaccess). It
// hands what it handed out to the cycle's capture.
type listedSlices struct {
	fwk.ResourceSliceLister
	served   *atomic.Pointer[Served]
	ignore   *atomic.Bool
	capture  *Capture
	bestFit  *bestFit
	steering *steering
	freeing  *atomic.Pointer[gangpreempt.DryRun]
}

func (l listedSlices) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	var slices []*resourceapi.ResourceSlice
	var err error
	if served := l.servedSlices(); served != nil {
		slices = served.Slices
	} else {
		slices, err = l.ResourceSliceLister.ListWithDeviceTaintRules()
	}
	if err == nil && l.bestFit != nil {
		// Before the counters go: the order reads what devices consume.
		slices = l.bestFit.order(slices, l.capture)
	}
	if err == nil && l.freeing != nil {
		if p := l.freeing.Load(); p != nil {
			slices = p.VictimsLast(slices)
		}
	}
	if err == nil && l.steering != nil {
		if allowed := l.steering.allowed.Load(); allowed != nil {
			slices = gangplan.OnlyPlanned(slices, *allowed, inUseOf(l.capture.inUse.Load()))
		}
		// Hidden devices leave only once the in-use set is known: one in
		// use must stay, for the counters it consumes.
		if hidden, inUse := l.steering.hidden.Load(), inUseOf(l.capture.inUse.Load()); hidden != nil && inUse != nil {
			slices = allocated.WithoutFree(slices, hidden.Has, inUse)
		}
	}
	if err == nil && l.ignore.Load() {
		slices = adminaccess.WithZeroCounterConsumption(slices)
	}
	if err == nil {
		l.capture.sawSlices(slices)
	}
	return slices, err
}

// servedSlices is the view being served (nil: none).
func (l listedSlices) servedSlices() *Served {
	if l.served == nil {
		return nil
	}
	return l.served.Load()
}

// steering limits the free devices the listing hands out, while
// upstream's PreFilter runs: for a planned member, to those planned for
// it (allowed); for a pod under a DeviceQuota, to those the quota can take
// (without the hidden ones).
type steering struct {
	allowed, hidden atomic.Pointer[sets.Set[structured.DeviceID]]
}

// inUseOf is the in-use test of what the cycle captured (nil: none).
func inUseOf(seen *InUse) func(structured.DeviceID) bool {
	if seen == nil {
		return nil
	}
	return seen.State.AllocatedDevices.Has
}
