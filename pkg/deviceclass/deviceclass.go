// Package deviceclass answers whether a DeviceClass's selectors accept a
// device, with upstream's CEL environment and compilation cache, as the
// allocator evaluates them.
package deviceclass

import (
	"context"
	"fmt"
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
	return SelectorsAccept(ctx, class.Spec.Selectors, driver, device)
}

// SelectorsAccept reports whether every CEL selector (a class's or a
// request's) accepts the driver's device, as Accepts does for a class.
func SelectorsAccept(ctx context.Context, deviceSelectors []resourceapi.DeviceSelector, driver string, device *resourceapi.Device) bool {
	input := cel.Device{
		Driver:                   driver,
		AllowMultipleAllocations: device.AllowMultipleAllocations,
		Attributes:               device.Attributes,
		Capacity:                 device.Capacity,
	}
	for _, selector := range deviceSelectors {
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

// List is a structured.DeviceClassLister over a map of classes by name.
type List map[string]*resourceapi.DeviceClass

// List returns every class.
func (l List) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, class := range l {
		out = append(out, class)
	}
	return out, nil
}

// Get returns the class of that name.
func (l List) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := l[name]; ok {
		return class, nil
	}
	return nil, fmt.Errorf("device class %s not found", name)
}
