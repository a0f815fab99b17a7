package gangplan

import (
	"maps"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/pkg/allocated"
	"github.com/drascope/drascope/pkg/dryrun"
)

// PlanTTL is how long a plan steers its members: longer than the
// scheduler's longest backoff by default (podMaxBackoffSeconds, 10s),
// after which the group's next cycle comes.
const PlanTTL = time.Minute

// Plans are the placements members are steered to, by pod UID, each for
// PlanTTL. Safe for concurrent use.
type Plans struct {
	mu    sync.Mutex
	byPod map[types.UID]plannedMember
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

type plannedMember struct {
	Placement
	expires time.Time
}

// Get returns the member's placement, nil when it has none or it expired.
func (p *Plans) Get(uid types.UID) *Placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	planned, ok := p.byPod[uid]
	if !ok {
		return nil
	}
	if p.clock().After(planned.expires) {
		delete(p.byPod, uid)
		return nil
	}
	return &planned.Placement
}

// Set keeps the placements for PlanTTL, dropping those expired.
func (p *Plans) Set(placements map[types.UID]Placement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	if p.byPod == nil {
		p.byPod = map[types.UID]plannedMember{}
	}
	for uid, planned := range p.byPod {
		if now.After(planned.expires) {
			delete(p.byPod, uid)
		}
	}
	for uid, placement := range placements {
		p.byPod[uid] = plannedMember{Placement: placement, expires: now.Add(PlanTTL)}
	}
}

// Forget drops the pods' placements.
func (p *Plans) Forget(pods []*v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pod := range pods {
		delete(p.byPod, pod.UID)
	}
}

func (p *Plans) clock() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// OnlyPlanned returns the slices without the devices that are free and not
// allowed, copying only the slices that change: a planned member's
// allocator then finds only its planned devices free. Devices in use stay:
// the allocator counts the shared counters they consume, and never hands
// them out. A device that allows multiple allocations stays too: a share
// of it may be free and in use at once. inUse may be nil (nothing in use).
func OnlyPlanned(listed []*resourceapi.ResourceSlice, allowed sets.Set[structured.DeviceID], inUse func(structured.DeviceID) bool) []*resourceapi.ResourceSlice {
	return allocated.WithoutFree(listed, func(id structured.DeviceID) bool { return !allowed.Has(id) }, inUse)
}

// Attempt is what the members' PreFilters of one pod-group cycle leave for
// the group's PodGroupPostFilter, which plans. Safe for concurrent use.
type Attempt struct {
	mu sync.Mutex
	// cycle is the first recorded member's view: before any member of
	// the cycle reserved anything.
	cycle   *dryrun.Cycle
	members map[types.UID]Member
	// steered: a member ran under a plan, so cycle is not the whole
	// cluster's view.
	steered bool
}

// MarkSteered records that a member ran under a plan.
func (a *Attempt) MarkSteered() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steered = true
}

// Record leaves the member's claims and, from the first member, the
// cycle's dry-run view.
func (a *Attempt) Record(pod *v1.Pod, cycle *dryrun.Cycle, claims []*resourceapi.ResourceClaim) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cycle == nil {
		a.cycle = cycle
	}
	if a.members == nil {
		a.members = map[types.UID]Member{}
	}
	a.members[pod.UID] = Member{Pod: pod, Claims: claims}
}

// Recorded returns what the members recorded: whether one ran under a
// plan, the first one's view, and the members by pod UID.
func (a *Attempt) Recorded() (steered bool, cycle *dryrun.Cycle, members map[types.UID]Member) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.steered, a.cycle, maps.Clone(a.members)
}
