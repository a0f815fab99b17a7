package devicequota

import (
	"fmt"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// Steering says which devices a pod must not be handed because its
// namespace's DeviceQuotas could not take them, so that the allocator,
// which never sees quotas, chooses among what is left: a prioritized
// list's next alternative, a partition in place of a whole GPU. It hides
// whole devices, as the allocator's in-use set does, so it can only say
// what is certain of one device: every device of a class whose device
// limit leaves fewer than the fewest a request of the pod asks of it, and
// a device whose counters alone exceed what a counter limit leaves. What
// only several devices together exceed, and consumable capacity (which
// the request, not the device, decides), are left to the check after
// allocation (Check).
type Steering struct {
	// blocked are the pod's classes some limit blocks: all their devices
	// (all), or those consuming more of a counter than is left.
	blocked map[string]*block
	// open are the pod's classes nothing blocks; admin, those of its
	// admin-access requests, which use no quota.
	open, admin map[string]bool
}

type block struct {
	all bool
	// spent: a counter limit has nothing left, so no device consuming the
	// counter fits; one consuming none still may, so spent does not hide
	// the class's devices whole, but a request of only this class is left
	// to the check after allocation, whose message says what it needs.
	spent bool
	// left is what the counter limits leave, the least of every quota's.
	left map[string]resource.Quantity
	// why names the limit: the device limit, or the counter limit that
	// leaves least.
	why string
}

// Steer returns the steering for a pod whose claims to allocate are
// claims, given its namespace's quotas and what the namespace uses (in
// flight included), which used counts only when a quota limits a class
// the pod asks; ok is false when nothing is to be hidden. It also
// hides nothing when a request of the pod has no alternative that the
// quota may take (none of its classes has a device left, or a counter
// limit of each has nothing left): the pod is then refused after
// allocation, with the limit and what it needs named (Check), rather
// than for devices it was not shown.
func Steer(quotas []*v1alpha1.DeviceQuota, used func() Usage, claims []*resourceapi.ResourceClaim) (*Steering, bool) {
	fewest, admin := fewestAsked(claims)
	if !limitsAny(quotas, fewest) {
		return nil, false
	}
	usage := used()
	s := &Steering{blocked: map[string]*block{}, open: map[string]bool{}, admin: admin}
	for class, count := range fewest {
		if b := blockOf(quotas, usage[class], class, count); b != nil {
			s.blocked[class] = b
		} else {
			s.open[class] = true
		}
	}
	if len(s.blocked) == 0 || !s.everyRequestHasAWay(claims) {
		return nil, false
	}
	return s, true
}

// Hides reports whether the pod must not be shown the device: a class of
// the pod that some limit blocks accepts it and blocks it (Blocks), and no
// other class of the pod accepts it (one open, one of an admin-access
// request, or one blocked without blocking it). accepts says whether a
// class's selectors accept the device.
func (s *Steering) Hides(device *resourceapi.Device, accepts func(class string) bool) bool {
	hide := false
	for class := range s.blocked {
		if !accepts(class) {
			continue
		}
		if !s.Blocks(class, device) {
			return false
		}
		hide = true
	}
	return hide && !s.anyOpen(accepts)
}

// Note says, in one bounded line, that devices were not offered and
// which limit kept them back (the first blocked class's, in name order).
func (s *Steering) Note() string {
	classes := slices.Sorted(maps.Keys(s.blocked))
	if len(classes) == 0 {
		return ""
	}
	return "devices were not offered that a DeviceQuota could not take (" + s.blocked[classes[0]].why + ")"
}

// anyOpen reports whether accepts is true of a class of the pod that no
// limit blocks, or that an admin-access request of the pod names (admin
// access uses no quota: its devices stay in view).
func (s *Steering) anyOpen(accepts func(class string) bool) bool {
	for _, classes := range []map[string]bool{s.open, s.admin} {
		for class := range classes {
			if accepts(class) {
				return true
			}
		}
	}
	return false
}

// Blocks reports whether the pod could not take the device under the
// class without exceeding a limit, for a class that accepts the device.
func (s *Steering) Blocks(class string, device *resourceapi.Device) bool {
	b := s.blocked[class]
	if b == nil {
		return false
	}
	if b.all {
		return true
	}
	var consumed map[string]resource.Quantity
	addCounters(&consumed, device)
	for name, left := range b.left {
		if need, ok := consumed[name]; ok && need.Sign() > 0 && need.Cmp(left) > 0 {
			return true
		}
	}
	return false
}

// fewestAsked is, for each class the claims' requests (or their
// alternatives) name, the fewest devices one of them asks of it;
// allocation mode All counts as one. Admin access counts nothing: its
// classes are apart (admin).
func fewestAsked(claims []*resourceapi.ResourceClaim) (fewest map[string]int64, admin map[string]bool) {
	fewest, admin = map[string]int64{}, map[string]bool{}
	note := func(class string, mode resourceapi.DeviceAllocationMode, count int64, adminAccess *bool) {
		if adminAccess != nil && *adminAccess {
			admin[class] = true
			return
		}
		if mode != resourceapi.DeviceAllocationModeExactCount {
			count = 1
		}
		if have, ok := fewest[class]; !ok || count < have {
			fewest[class] = count
		}
	}
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if exact := request.Exactly; exact != nil {
				note(exact.DeviceClassName, exact.AllocationMode, exact.Count, exact.AdminAccess)
			}
			for _, sub := range request.FirstAvailable {
				note(sub.DeviceClassName, sub.AllocationMode, sub.Count, nil)
			}
		}
	}
	return fewest, admin
}

// limitsAny reports whether a limit of the quotas names one of the
// classes.
func limitsAny(quotas []*v1alpha1.DeviceQuota, classes map[string]int64) bool {
	for _, quota := range quotas {
		for _, limit := range quota.Spec.Limits {
			if _, ok := classes[limit.DeviceClassName]; ok {
				return true
			}
		}
	}
	return false
}

// blockOf is what the quotas' limits on the class block for a pod that
// asks at least fewest of its devices; nil: nothing.
func blockOf(quotas []*v1alpha1.DeviceQuota, have *Amounts, class string, fewest int64) *block {
	if have == nil {
		have = &Amounts{}
	}
	var b block
	for _, quota := range quotas {
		for _, limit := range quota.Spec.Limits {
			if limit.DeviceClassName != class {
				continue
			}
			named := fmt.Sprintf("DeviceQuota %s/%s: class %s, ", quota.Namespace, quota.Name, class)
			if limit.Devices != nil && have.Devices+fewest > *limit.Devices {
				return &block{all: true, why: fmt.Sprintf("%sdevices: limit %d, used %d", named, *limit.Devices, have.Devices)}
			}
			for _, name := range slices.Sorted(maps.Keys(limit.Counters)) {
				max, used := limit.Counters[name], have.Counters[name]
				left := max.DeepCopy()
				left.Sub(used)
				if known, ok := b.left[name]; !ok || left.Cmp(known) < 0 {
					if b.left == nil {
						b.left = map[string]resource.Quantity{}
					}
					b.left[name] = left
					b.spent = b.spent || left.Sign() <= 0
					b.why = fmt.Sprintf("%scounter %s: limit %s, used %s", named, name, max.String(), used.String())
				}
			}
		}
	}
	if len(b.left) == 0 {
		return nil
	}
	return &b
}

// everyRequestHasAWay reports whether each request of the claims has an
// alternative (or its one class) that no limit blocks whole.
func (s *Steering) everyRequestHasAWay(claims []*resourceapi.ResourceClaim) bool {
	usable := func(class string, admin *bool) bool {
		if admin != nil && *admin || s.open[class] {
			return true
		}
		b := s.blocked[class]
		return !b.all && !b.spent
	}
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			if exact := request.Exactly; exact != nil {
				if !usable(exact.DeviceClassName, exact.AdminAccess) {
					return false
				}
				continue
			}
			way := false
			for _, sub := range request.FirstAvailable {
				way = way || usable(sub.DeviceClassName, nil)
			}
			if !way {
				return false
			}
		}
	}
	return true
}
