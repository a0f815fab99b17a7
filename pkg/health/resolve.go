package health

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// claimPrefix marks DRA entries in allocatedResourcesStatus; other entries
// are device plugin resources.
const claimPrefix = "claim:"

// Resolver turns the resource IDs of a pod's health entries into devices.
//
// kubelet writes "<driver>/<pool>/<device>", unless the driver gave the
// device CDI device IDs; then it writes the first one ("vendor/class=name"),
// which names no pool. Such an ID is resolved through the pod's claim: when
// the request the entry is for holds exactly one device, it is that one.
type Resolver struct {
	// KnownDriver reports whether a driver publishes ResourceSlices; reports
	// that name another driver are ignored. Nil: every driver is known.
	KnownDriver func(driver string) bool
	// Claim returns a ResourceClaim from the informer cache, to resolve CDI
	// device IDs. Nil: such IDs are ignored.
	Claim func(namespace, name string) (*resourceapi.ResourceClaim, error)
}

// maxLogged bounds how many distinct keys a onceSet remembers; past it,
// further ones are logged at a high verbosity only.
const maxLogged = 1000

// onceSet remembers what was logged, so that each bad resource ID or each
// untrusted pod is logged once.
type onceSet struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// first reports whether key is seen for the first time.
func (l *onceSet) first(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[key]; ok {
		return false
	}
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	if len(l.seen) >= maxLogged {
		return false
	}
	l.seen[key] = struct{}{}
	return true
}

// foreachDRAEntry calls fn with each DRA entry of the allocatedResourcesStatus
// of the pod's init, regular and ephemeral containers, and the claim
// reference the entry is named for ("<claim>" or "<claim>/<request>").
func foreachDRAEntry(pod *v1.Pod, fn func(entry v1.ResourceStatus, claimRef string)) {
	for _, statuses := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, status := range statuses {
			for _, entry := range status.AllocatedResourcesStatus {
				if claimRef, ok := strings.CutPrefix(string(entry.Name), claimPrefix); ok {
					fn(entry, claimRef)
				}
			}
		}
	}
}

// reportsOf returns the DRA health entries of a pod's status as reports,
// one per device. Entries that cannot be resolved are logged once each and
// left out. held are the allocation results the pod's claims had while it
// ran, by the pod's claim name, for CDI device IDs of claims released since.
func (c *Cache) reportsOf(logger klog.Logger, pod *v1.Pod, held map[string][]resourceapi.DeviceRequestAllocationResult) map[Device]report {
	var reports map[Device]report
	foreachDRAEntry(pod, func(entry v1.ResourceStatus, claimRef string) {
		podClaim, request, _ := strings.Cut(claimRef, "/")
		for _, h := range entry.Resources {
			device, err := c.opts.Resolver.resolve(pod, podClaim, request, string(h.ResourceID), held[podClaim])
			if err != nil {
				c.ignore(logger, pod, string(entry.Name), string(h.ResourceID), err)
				continue
			}
			if reports == nil {
				reports = map[Device]report{}
			}
			// kubelet writes one entry per claim and request; should two
			// containers disagree, the worse health counts.
			if r, ok := reports[device]; !ok || worse(h.Health, r.health) {
				reports[device] = report{health: h.Health, message: ptr.Deref(h.Message, "")}
			}
		}
	})
	return reports
}

// worse orders Unhealthy before Unknown before Healthy.
func worse(a, b v1.ResourceHealthStatus) bool {
	rank := func(h v1.ResourceHealthStatus) int {
		switch h {
		case v1.ResourceHealthStatusUnhealthy:
			return 2
		case v1.ResourceHealthStatusHealthy:
			return 0
		}
		return 1
	}
	return rank(a) > rank(b)
}

func (c *Cache) ignore(logger klog.Logger, pod *v1.Pod, entry, id string, err error) {
	if c.opts.OnIgnored != nil {
		c.opts.OnIgnored(IgnoredUnresolvable)
	}
	if c.ignored.first(id) {
		logger.Info("Ignoring a device health report that names no known device; further reports with this resource ID are ignored silently",
			"pod", klog.KObj(pod), "entry", entry, "resourceID", id, "reason", err.Error())
		return
	}
	logger.V(5).Info("Ignoring a device health report", "pod", klog.KObj(pod), "entry", entry, "resourceID", id, "reason", err.Error())
}

// resolve turns one resource ID of the entry for podClaim (and request,
// empty for a whole claim) into a device; held are the results the claim
// had while the pod ran, if known.
func (r Resolver) resolve(pod *v1.Pod, podClaim, request, id string, held []resourceapi.DeviceRequestAllocationResult) (Device, error) {
	if strings.Contains(id, "=") {
		return r.resolveCDI(pod, podClaim, request, held)
	}
	d, err := ParseResourceID(id)
	if err != nil {
		return Device{}, err
	}
	if r.KnownDriver != nil && !r.KnownDriver(d.Driver) {
		return Device{}, fmt.Errorf("no ResourceSlice is published by driver %q", d.Driver)
	}
	return d, nil
}

// ParseResourceID parses "<driver>/<pool>/<device>". Pool names may contain
// slashes; driver and device names may not.
func ParseResourceID(id string) (Device, error) {
	parts := strings.Split(id, "/")
	if len(parts) < 3 {
		return Device{}, fmt.Errorf("want <driver>/<pool>/<device>, got %d part(s)", len(parts))
	}
	d := Device{Driver: parts[0], Pool: strings.Join(parts[1:len(parts)-1], "/"), Name: parts[len(parts)-1]}
	if errs := validation.IsDNS1123Subdomain(d.Driver); len(errs) > 0 {
		return Device{}, fmt.Errorf("driver name %q: %s", d.Driver, strings.Join(errs, "; "))
	}
	for _, segment := range parts[1 : len(parts)-1] {
		if errs := validation.IsDNS1123Subdomain(segment); len(errs) > 0 {
			return Device{}, fmt.Errorf("pool name %q: %s", d.Pool, strings.Join(errs, "; "))
		}
	}
	if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
		return Device{}, fmt.Errorf("device name %q: %s", d.Name, strings.Join(errs, "; "))
	}
	return d, nil
}

// resolveCDI finds the one device that the pod's claim holds for request:
// from what the claim held for this pod while it ran, when known;
// otherwise from the claim, if it is reserved for the pod. Never from a
// claim's allocation for another pod: a standalone claim reused by a new
// pod on another device would turn the kept pod's report into a report
// about a device it never held.
func (r Resolver) resolveCDI(pod *v1.Pod, podClaim, request string, held []resourceapi.DeviceRequestAllocationResult) (Device, error) {
	results, source := held, fmt.Sprintf("claim %q while the pod held it", podClaim)
	if held == nil {
		var err error
		if results, source, err = r.claimResults(pod, podClaim); err != nil {
			return Device{}, err
		}
	}
	var found []Device
	for _, result := range results {
		resultRequest, _, _ := strings.Cut(result.Request, "/")
		if request == "" || resultRequest == request {
			found = append(found, Device{Driver: result.Driver, Pool: result.Pool, Name: result.Device})
		}
	}
	if len(found) != 1 {
		return Device{}, fmt.Errorf("a CDI device ID, and request %q of %s holds %d devices: cannot tell which one it is", request, source, len(found))
	}
	if r.KnownDriver != nil && !r.KnownDriver(found[0].Driver) {
		return Device{}, fmt.Errorf("no ResourceSlice is published by driver %q", found[0].Driver)
	}
	return found[0], nil
}

// claimResults returns the allocation results of the pod's claim podClaim.
func (r Resolver) claimResults(pod *v1.Pod, podClaim string) ([]resourceapi.DeviceRequestAllocationResult, string, error) {
	if r.Claim == nil {
		return nil, "", errors.New("a CDI device ID, and claims cannot be looked up")
	}
	var ref *v1.PodResourceClaim
	for i := range pod.Spec.ResourceClaims {
		if pod.Spec.ResourceClaims[i].Name == podClaim {
			ref = &pod.Spec.ResourceClaims[i]
		}
	}
	if ref == nil {
		return nil, "", fmt.Errorf("a CDI device ID for claim %q, which the pod does not reference", podClaim)
	}
	name, _, err := resourceclaim.Name(pod, ref)
	if err != nil || name == nil {
		return nil, "", fmt.Errorf("a CDI device ID for claim %q, whose ResourceClaim is not known yet", podClaim)
	}
	claim, err := r.Claim(pod.Namespace, *name)
	if err != nil || claim == nil || claim.Status.Allocation == nil {
		return nil, "", fmt.Errorf("a CDI device ID for ResourceClaim %s/%s, which is gone or not allocated", pod.Namespace, *name)
	}
	if !resourceclaim.IsReservedForPod(pod, claim, false) {
		return nil, "", fmt.Errorf("a CDI device ID for ResourceClaim %s/%s, which is not reserved for the pod", pod.Namespace, *name)
	}
	return claim.Status.Allocation.Devices.Results, fmt.Sprintf("ResourceClaim %s/%s", pod.Namespace, *name), nil
}

// NewHealthyReports reports whether pod's status says Healthy for a DRA
// resource that old's did not; old may be nil. Resource IDs are compared as
// written, unresolved: this is the cheap check of a queueing hint.
func NewHealthyReports(old, pod *v1.Pod) bool {
	healthy := func(pod *v1.Pod) map[string]bool {
		var ids map[string]bool // made on first use: most pods report nothing
		if pod == nil {
			return ids
		}
		foreachDRAEntry(pod, func(entry v1.ResourceStatus, _ string) {
			for _, h := range entry.Resources {
				if h.Health == v1.ResourceHealthStatusHealthy {
					if ids == nil {
						ids = map[string]bool{}
					}
					ids[string(h.ResourceID)] = true
				}
			}
		})
		return ids
	}
	before := healthy(old)
	for id := range healthy(pod) {
		if !before[id] {
			return true
		}
	}
	return false
}
