package devicechoice

import resourceapi "k8s.io/api/resource/v1"

// Wanted counts the devices the claims ask for by count (Options.Want):
// each request's count (the first alternative of a prioritized list);
// requests for all devices of a class count nothing.
func Wanted(claims []*resourceapi.ResourceClaim) int {
	n := 0
	for _, claim := range claims {
		for _, request := range claim.Spec.Devices.Requests {
			switch {
			case request.Exactly != nil && request.Exactly.AllocationMode != resourceapi.DeviceAllocationModeAll:
				n += int(max(request.Exactly.Count, 1))
			case len(request.FirstAvailable) > 0 && request.FirstAvailable[0].AllocationMode != resourceapi.DeviceAllocationModeAll:
				n += int(max(request.FirstAvailable[0].Count, 1))
			}
		}
	}
	return n
}
