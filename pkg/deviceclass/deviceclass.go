// Package deviceclass answers whether a DeviceClass's selectors accept a
// device, with upstream's CEL environment and compilation cache, as the
// allocator evaluates them.
package deviceclass

import (
	"context"
	"regexp"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// selectors compiles class selectors. Both optional CEL features are on:
// they only widen what a selector may read, and a driver publishes list
// attributes or consumable capacity only where the apiserver accepted them.
var selectors = cel.NewCache(50, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

// Accepts reports whether every CEL selector of the class accepts the
// driver's device. A selector that does not compile, or fails on the
// device, does not accept it: the allocator would not allocate it either.
func Accepts(ctx context.Context, class *resourceapi.DeviceClass, driver string, device *resourceapi.Device) bool {
	input := cel.Device{
		Driver:                   driver,
		AllowMultipleAllocations: device.AllowMultipleAllocations,
		Attributes:               device.Attributes,
		Capacity:                 device.Capacity,
	}
	for _, selector := range class.Spec.Selectors {
		if selector.CEL == nil {
			continue
		}
		result := selectors.GetOrCompile(selector.CEL.Expression)
		if result.Error != nil {
			return false
		}
		if matches, _, err := result.DeviceMatches(ctx, input); err != nil || !matches {
			return false
		}
	}
	return true
}

// driverOnly matches a selector that names the driver and nothing else,
// as most DeviceClasses do.
var driverOnly = regexp.MustCompile(`^\s*device\.driver\s*==\s*"([^"\\]+)"\s*$`)

// Driver is the driver a class's devices must be of, when one of its
// selectors is exactly device.driver == "X" (selectors are ANDed).
func Driver(class *resourceapi.DeviceClass) (string, bool) {
	for _, selector := range class.Spec.Selectors {
		if selector.CEL == nil {
			continue
		}
		if m := driverOnly.FindStringSubmatch(selector.CEL.Expression); m != nil {
			return m[1], true
		}
	}
	return "", false
}
