// Package devicequota counts what the DRA devices allocated to a
// namespace's claims add up to, per device class, and checks it against
// the namespace's DeviceQuotas (drascope.dev/v1alpha1): the devices, the
// shared counters they consume, and the consumable capacity their shares
// take. A device counts for the class its request (or the chosen
// alternative of a prioritized list) names; an admin-access result counts
// nothing (KEP-5018: it uses nothing). It knows nothing of the scheduler:
// the plugin hands it the claims as the scheduler sees them, in flight
// included.
package devicequota

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// Amounts are what one class's devices add up to.
type Amounts struct {
	Devices  int64
	Counters map[string]resource.Quantity
	Capacity map[resourceapi.QualifiedName]resource.Quantity
}

// add adds b to a.
func (a *Amounts) add(b *Amounts) {
	a.Devices += b.Devices
	addAll(&a.Counters, b.Counters)
	addAll(&a.Capacity, b.Capacity)
}

func addAll[K comparable](to *map[K]resource.Quantity, from map[K]resource.Quantity) {
	for name, q := range from {
		if *to == nil {
			*to = map[K]resource.Quantity{}
		}
		// Copies: a Quantity shares its decimal form with its copies.
		sum := (*to)[name].DeepCopy()
		sum.Add(q.DeepCopy())
		(*to)[name] = sum
	}
}

// Usage is what a namespace's claims use, by device class.
type Usage map[string]*Amounts

// Add adds other to u.
func (u Usage) Add(other Usage) {
	for class, amounts := range other {
		if u[class] == nil {
			u[class] = &Amounts{}
		}
		u[class].add(amounts)
	}
}

// DeviceLookup returns a device as its pool publishes it; nil when the
// device is unknown (its counters then count nothing).
type DeviceLookup func(structured.DeviceID) *resourceapi.Device

// OfAllocation is what an allocation of the claim uses, by class.
func OfAllocation(claim *resourceapi.ResourceClaim, allocation *resourceapi.AllocationResult, lookup DeviceLookup) Usage {
	usage := Usage{}
	if allocation == nil {
		return usage
	}
	// A device the claim holds several shares of counts once, and its
	// counters once: it consumes them once.
	counted := map[structured.DeviceID]bool{}
	for i := range allocation.Devices.Results {
		result := &allocation.Devices.Results[i]
		if result.AdminAccess != nil && *result.AdminAccess {
			continue
		}
		class := ClassOf(claim, result.Request)
		if class == "" {
			continue
		}
		amounts := usage[class]
		if amounts == nil {
			amounts = &Amounts{}
			usage[class] = amounts
		}
		addAll(&amounts.Capacity, result.ConsumedCapacity)
		id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
		if counted[id] {
			continue
		}
		counted[id] = true
		amounts.Devices++
		if lookup == nil {
			continue
		}
		if device := lookup(id); device != nil {
			addCounters(&amounts.Counters, device)
		}
	}
	return usage
}

// addCounters adds what the device consumes of each shared counter, by
// counter name, whichever counter set it is of.
func addCounters(to *map[string]resource.Quantity, device *resourceapi.Device) {
	for _, consumption := range device.ConsumesCounters {
		for name, counter := range consumption.Counters {
			addAll(to, map[string]resource.Quantity{name: counter.Value})
		}
	}
}

// UsageOf is what the allocations of the claims use, by class.
func UsageOf(claims []*resourceapi.ResourceClaim, lookup DeviceLookup) Usage {
	usage := Usage{}
	for _, claim := range claims {
		usage.Add(OfAllocation(claim, claim.Status.Allocation, lookup))
	}
	return usage
}

// NeedOf is what the claims need for certain, by class: the devices of
// their requests that name one class and an exact count. Prioritized
// lists, allocation mode All and admin access count nothing: which
// alternative, how many devices, and admin access use no quota.
func NeedOf(claims []*resourceapi.ResourceClaim) Usage {
	need := Usage{}
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			exact := request.Exactly
			if exact == nil || exact.AllocationMode != resourceapi.DeviceAllocationModeExactCount || (exact.AdminAccess != nil && *exact.AdminAccess) {
				continue
			}
			need.Add(Usage{exact.DeviceClassName: {Devices: exact.Count}})
		}
	}
	return need
}

// UsedOf is what a quota's status says is used.
func UsedOf(status v1alpha1.DeviceQuotaStatus) Usage {
	used := Usage{}
	for _, class := range status.Classes {
		amounts := &Amounts{Counters: class.Used.Counters, Capacity: class.Used.Capacity}
		if class.Used.Devices != nil {
			amounts.Devices = *class.Used.Devices
		}
		used[class.DeviceClassName] = amounts
	}
	return used
}

// ClassOf is the device class a result's request names: the request's,
// or, for "request/subrequest", the subrequest's; "" when the claim has no
// such request.
func ClassOf(claim *resourceapi.ResourceClaim, request string) string {
	name, sub, _ := strings.Cut(request, "/")
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name != name {
			continue
		}
		if sub == "" {
			if r.Exactly != nil {
				return r.Exactly.DeviceClassName
			}
			return ""
		}
		for _, s := range r.FirstAvailable {
			if s.Name == sub {
				return s.DeviceClassName
			}
		}
	}
	return ""
}

// Excess is a limit that an allocation would exceed.
type Excess struct {
	// Quota is the DeviceQuota's name; Class, the device class; Amount,
	// "devices" or "counter NAME" or "capacity NAME".
	Quota, Class, Amount string
	Limit, Used, Needed  resource.Quantity
}

// String says which quota, which limit, what is used and what is needed,
// in a bounded line: the names are bounded by the API.
func (e Excess) String() string {
	return fmt.Sprintf("DeviceQuota %s: class %s, %s: limit %s, used %s, this pod needs %s",
		e.Quota, e.Class, e.Amount, e.Limit.String(), e.Used.String(), e.Needed.String())
}

// Check returns the first limit of the quotas (in name order) that used
// plus adding exceeds, among the classes adding uses: a limit already
// exceeded (lowered below what is used) refuses any more of its amount,
// and none of another.
func Check(quotas []*v1alpha1.DeviceQuota, used, adding Usage) (Excess, bool) {
	quotas = slices.Clone(quotas)
	slices.SortFunc(quotas, func(a, b *v1alpha1.DeviceQuota) int { return strings.Compare(a.Name, b.Name) })
	for _, quota := range quotas {
		for _, limit := range quota.Spec.Limits {
			need := adding[limit.DeviceClassName]
			if need == nil {
				continue
			}
			have := used[limit.DeviceClassName]
			if have == nil {
				have = &Amounts{}
			}
			excess := Excess{Quota: quota.Namespace + "/" + quota.Name, Class: limit.DeviceClassName}
			if limit.Devices != nil && need.Devices > 0 && have.Devices+need.Devices > *limit.Devices {
				excess.Amount = "devices"
				excess.Limit, excess.Used, excess.Needed = *resource.NewQuantity(*limit.Devices, resource.DecimalSI), *resource.NewQuantity(have.Devices, resource.DecimalSI), *resource.NewQuantity(need.Devices, resource.DecimalSI)
				return excess, true
			}
			if name, ok := over(limit.Counters, have.Counters, need.Counters); ok {
				excess.Amount = "counter " + name
				excess.Limit, excess.Used, excess.Needed = limit.Counters[name], have.Counters[name], need.Counters[name]
				return excess, true
			}
			if name, ok := over(limit.Capacity, have.Capacity, need.Capacity); ok {
				excess.Amount = "capacity " + string(name)
				excess.Limit, excess.Used, excess.Needed = limit.Capacity[name], have.Capacity[name], need.Capacity[name]
				return excess, true
			}
		}
	}
	return Excess{}, false
}

// over returns the first name (in order) whose used plus needed exceeds
// its limit, of the names needed.
func over[K ~string](limits, used, needed map[K]resource.Quantity) (K, bool) {
	names := make([]K, 0, len(limits))
	for name := range limits {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		need, ok := needed[name]
		if !ok || need.Sign() <= 0 {
			continue
		}
		sum := used[name].DeepCopy()
		sum.Add(need)
		if limit := limits[name]; sum.Cmp(limit) > 0 {
			return name, true
		}
	}
	return "", false
}

// Status is the quota's status for what is used now: per limited class,
// used and left (never below zero), for each amount limited.
func Status(quota *v1alpha1.DeviceQuota, used Usage) v1alpha1.DeviceQuotaStatus {
	status := v1alpha1.DeviceQuotaStatus{ObservedGeneration: quota.Generation}
	for _, limit := range quota.Spec.Limits {
		have := used[limit.DeviceClassName]
		if have == nil {
			have = &Amounts{}
		}
		// Devices used are always shown, so that the printer column of
		// each class's devices lines up with its class.
		class := v1alpha1.DeviceClassUsage{DeviceClassName: limit.DeviceClassName}
		class.Used.Devices = ptrTo(have.Devices)
		if limit.Devices != nil {
			class.Left.Devices = ptrTo(max(0, *limit.Devices-have.Devices))
		}
		class.Used.Counters, class.Left.Counters = usedAndLeft(limit.Counters, have.Counters)
		class.Used.Capacity, class.Left.Capacity = usedAndLeft(limit.Capacity, have.Capacity)
		status.Classes = append(status.Classes, class)
	}
	return status
}

func usedAndLeft[K comparable](limits, used map[K]resource.Quantity) (map[K]resource.Quantity, map[K]resource.Quantity) {
	if len(limits) == 0 {
		return nil, nil
	}
	usedOut, leftOut := map[K]resource.Quantity{}, map[K]resource.Quantity{}
	for name, limit := range limits {
		have := used[name]
		usedOut[name] = have.DeepCopy()
		left := limit.DeepCopy()
		left.Sub(have)
		if left.Sign() < 0 {
			left = resource.Quantity{}
		}
		leftOut[name] = left
	}
	return usedOut, leftOut
}

func ptrTo[T any](v T) *T { return &v }
