package dryrun

import (
	"math"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/deviceclass"
)

// MayFit reports whether the node's share could hold the claims at all,
// without a search: it is false only when the claims need more devices,
// of the drivers their classes select, than the share has free, where a
// partitionable device counts free only while its pool's shared counters
// have room for it.
//
// The allocator is a backtracking search with no such check: asked for one
// device more than a node has, over identical devices, it tries every
// assignment of devices to requests before it gives up. MayFit lets a dry
// run skip that search, and lets the gang planner ask a node for no more
// members than could fit. It is conservative: it may say true of claims
// that do not fit (selectors beyond the driver, taints, capacity,
// constraints), never false of claims that do.
func (n *Node) MayFit(claims []*resourceapi.ResourceClaim) bool {
	needs, ok := n.needsOf(claims)
	if !ok {
		return true
	}
	if len(needs.byDriver) == 0 && needs.anyDriver == 0 {
		return true
	}
	free := n.freeDevices()
	for driver, count := range needs.byDriver {
		if !free.unlimited[driver] && count > free.count[driver] {
			return false
		}
	}
	if needs.anyDriver == 0 || len(free.unlimited) > 0 {
		return true
	}
	spare := 0
	for driver, have := range free.count {
		spare += max(have-needs.byDriver[driver], 0)
	}
	return needs.anyDriver <= spare
}

// deviceNeeds counts the devices claims need: by the driver their class
// names, and those of any driver (a class whose selectors are not just a
// driver, or prioritized alternatives of several drivers).
type deviceNeeds struct {
	byDriver  map[string]int
	anyDriver int
}

// needsOf counts the devices each request needs at least: its count, one
// for allocation mode All (the allocator requires one), the smallest of
// its alternatives; admin-access requests need none, as they may use
// devices in use. ok is false when a class cannot be found: the allocator
// says so itself.
func (n *Node) needsOf(claims []*resourceapi.ResourceClaim) (needs deviceNeeds, ok bool) {
	needs.byDriver = map[string]int{}
	classes := n.cycle.allocating.Classes
	driverOf := func(className string) (string, bool, bool) {
		if classes == nil {
			return "", false, false
		}
		class, err := classes.Get(className)
		if err != nil || class == nil {
			return "", false, false
		}
		driver, named := deviceclass.Driver(class)
		return driver, named, true
	}
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil:
				if request.Exactly.AdminAccess != nil && *request.Exactly.AdminAccess {
					continue
				}
				driver, named, found := driverOf(request.Exactly.DeviceClassName)
				count, known := countOf(request.Exactly.AllocationMode, request.Exactly.Count)
				if !found || !known {
					return deviceNeeds{}, false
				}
				needs.add(driver, named, count)
			case len(request.FirstAvailable) > 0:
				if !n.cycle.allocating.Features.PrioritizedList {
					// The allocator refuses it with an error of its own.
					return deviceNeeds{}, false
				}
				fewest, driver, oneDriver := math.MaxInt, "", true
				for i, sub := range request.FirstAvailable {
					d, named, found := driverOf(sub.DeviceClassName)
					if !found {
						return deviceNeeds{}, false
					}
					if !named || (i > 0 && d != driver) {
						oneDriver = false
					}
					count, known := countOf(sub.AllocationMode, sub.Count)
					if !known {
						return deviceNeeds{}, false
					}
					driver = d
					fewest = min(fewest, count)
				}
				needs.add(driver, oneDriver, fewest)
			}
		}
	}
	return needs, true
}

func (d *deviceNeeds) add(driver string, named bool, count int) {
	if named {
		d.byDriver[driver] += count
	} else {
		d.anyDriver += count
	}
}

// countOf is the fewest devices a request of the mode and count takes:
// one for All (the allocator requires one), the count otherwise; known is
// false for a mode this check does not know, which the allocator judges.
func countOf(mode resourceapi.DeviceAllocationMode, count int64) (n int, known bool) {
	switch mode {
	case resourceapi.DeviceAllocationModeAll:
		return 1, true
	case resourceapi.DeviceAllocationModeExactCount, "":
		return int(max(0, min(count, math.MaxInt32))), true
	}
	return 0, false
}

// freeDevices bound, by driver, how many of a node share's devices not in
// use can be allocated together.
type freeDevices struct {
	count map[string]int
	// unlimited are drivers with a device that allows several
	// allocations: its shares are counted by capacity, which this check
	// does not follow.
	unlimited map[string]bool
}

// counterKey names one counter of one counter set of one pool.
type counterKey struct {
	pool         pool
	set, counter string
}

// freeDevices counts the share's free devices. A free device
// that consumes counters is assigned to the counter it can be allocated
// least often from (what is left of it divided by what the device
// consumes); all devices assigned to one counter can be allocated together
// at most as often as what is left of it allows the one that consumes
// least. That bound is what makes a gang that needs more of a GPU's memory
// than it has a quick no.
func (n *Node) freeDevices() freeDevices {
	free := freeDevices{count: map[string]int{}, unlimited: map[string]bool{}}
	generation := map[pool]int64{}
	for _, slice := range n.slices {
		p := pool{driver: slice.Spec.Driver, name: slice.Spec.Pool.Name}
		g, seen := generation[p]
		switch {
		case !seen:
			generation[p] = slice.Spec.Pool.Generation
		case g != slice.Spec.Pool.Generation:
			// The allocator picks among the generations by which slices
			// reach the node; rather than follow it, the driver counts as
			// unlimited while one of its pools is between generations.
			free.unlimited[p.driver] = true
		}
	}
	current := func(slice *resourceapi.ResourceSlice) bool {
		return slice.Spec.Pool.Generation == generation[pool{driver: slice.Spec.Driver, name: slice.Spec.Pool.Name}]
	}
	left := map[counterKey]float64{}
	for _, slice := range n.slices {
		if !current(slice) {
			continue
		}
		p := pool{driver: slice.Spec.Driver, name: slice.Spec.Pool.Name}
		for _, set := range slice.Spec.SharedCounters {
			for name, counter := range set.Counters {
				left[counterKey{pool: p, set: set.Name, counter: name}] = counter.Value.AsApproximateFloat64()
			}
		}
	}
	type limited struct {
		devices  int
		smallest float64
	}
	byCounter := map[counterKey]*limited{}
	type partition struct {
		device *resourceapi.Device
		p      pool
	}
	var waiting []partition
	for _, slice := range n.slices {
		if !current(slice) {
			continue
		}
		p := pool{driver: slice.Spec.Driver, name: slice.Spec.Pool.Name}
		for i := range slice.Spec.Devices {
			device := &slice.Spec.Devices[i]
			inUse := n.state.AllocatedDevices.Has(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, device.Name))
			switch {
			case device.AllowMultipleAllocations != nil && *device.AllowMultipleAllocations:
				free.unlimited[slice.Spec.Driver] = true
			case inUse:
				for _, consumption := range device.ConsumesCounters {
					for name, counter := range consumption.Counters {
						left[counterKey{pool: p, set: consumption.CounterSet, counter: name}] -= counter.Value.AsApproximateFloat64()
					}
				}
			case len(device.ConsumesCounters) == 0:
				free.count[slice.Spec.Driver]++
			default:
				waiting = append(waiting, partition{device: device, p: p})
			}
		}
	}
	// After every device in use is subtracted: how often each free device
	// could still be allocated from each counter it consumes.
	for _, w := range waiting {
		best, bestTimes, consumes := counterKey{}, math.Inf(1), 0.0
		for _, consumption := range w.device.ConsumesCounters {
			for name, counter := range consumption.Counters {
				amount := counter.Value.AsApproximateFloat64()
				if amount <= 0 {
					continue
				}
				key := counterKey{pool: w.p, set: consumption.CounterSet, counter: name}
				remaining, known := left[key]
				if !known {
					continue
				}
				if times := math.Max(remaining, 0) / amount; times < bestTimes {
					best, bestTimes, consumes = key, times, amount
				}
			}
		}
		if math.IsInf(bestTimes, 1) {
			// It consumes nothing measurable: as good as a plain device.
			free.count[w.p.driver]++
			continue
		}
		l := byCounter[best]
		if l == nil {
			l = &limited{smallest: consumes}
			byCounter[best] = l
		}
		l.devices++
		l.smallest = math.Min(l.smallest, consumes)
	}
	for key, l := range byCounter {
		// A little slack, so that rounding never refuses what fits.
		times := math.Floor(math.Max(left[key], 0)/l.smallest + 1e-9)
		free.count[key.pool.driver] += int(math.Min(float64(l.devices), times))
	}
	return free
}
