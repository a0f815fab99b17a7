package drascope

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/drascope/drascope/pkg/devicescore"
	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/filtermemo"
	"github.com/drascope/drascope/pkg/gangplan"
	"github.com/drascope/drascope/pkg/nodeprune"
	"github.com/drascope/drascope/pkg/whatif"
	"github.com/drascope/drascope/pkg/withheld"
)

// Every piece of state DRAScope keeps for one scheduling cycle, beside
// upstream's own (which upstream's PreFilter writes under its key and its
// later extension points read). Each is written once, by the extension
// point named, and read only after it; a missing entry means the writer
// did not run or had nothing to say, and every reader copes.
//
//	key               written by             read by                              valid while
//	claimsKey         PreFilter              Reserve, PreScore                    the cycle: the pod's claims as it began
//	withheldKey       PreFilter (Avoid)      Filter, PostFilter                   the cycle: grouped once, at first use
//	refusedEarlyKey   PreFilter (pruneFirst) PostFilter                           the cycle: upstream's PreFilter did not run
//	mixedAdminKey     PreFilter              Filter                               the cycle
//	whatIfKey         PreFilter              AddPod, RemovePod, Filter,           the cycle; each clone its own pods
//	                                         PostFilter, Reserve, PreScore
//	memoKey           PreFilter              Filter, Reserve                      the cycle, for the nodes it hashed
//	shortageKey       PreFilter              PostFilter                           the cycle: what the allocator was built from
//	scoringKey        PreScore               NormalizeScore                       the cycle
//	signalledKey      Reserve                PreBind                              until PreBind
//	quotaReservedKey  Reserve                Unreserve                            the cycle: the epoch a DeviceQuota let the pod's allocations in at
//	quotaSteeredKey   PreFilter              PostFilter                           the cycle: what the quota check saw when it hid devices, and why
//	gangAttemptKey    PreFilter (members)    PodGroupPostFilter                   one pod-group cycle (its own state)
//
// Clones: preemption evaluates nodes on clones of the cycle state. Only
// the what-if keeps something per clone (the pods a dry run removed and
// added); everything else is shared, being read only or filled once.
const (
	claimsKey        fwk.StateKey = Name + "/claims"
	withheldKey      fwk.StateKey = Name + "/withheld"
	refusedEarlyKey  fwk.StateKey = Name + "/refused-early"
	mixedAdminKey    fwk.StateKey = Name + "/mixed-admin-access"
	whatIfKey        fwk.StateKey = Name + "/whatif"
	memoKey          fwk.StateKey = Name + "/filter-memo"
	shortageKey      fwk.StateKey = Name + "/shortage"
	scoringKey       fwk.StateKey = Name + "/scoring"
	signalledKey     fwk.StateKey = Name + "/signalled"
	quotaReservedKey fwk.StateKey = Name + "/quota-reserved"
	quotaSteeredKey  fwk.StateKey = Name + "/quota-steered"
	gangAttemptKey   fwk.StateKey = Name + "/gang-attempt"
)

// Clone shares the claims: they are only read.
func (c *podClaims) Clone() fwk.StateData { return c }

// withheldState is the cycle's withheld devices (pkg/withheld), shared by
// clones: grouped once, then only read.
type withheldState struct{ *withheld.Cycle }

func (s withheldState) Clone() fwk.StateData { return s }

// refusedEarlyData marks a cycle whose pod pruneFirst refused: upstream's
// PreFilter did not run, and its cycle state is not there.
type refusedEarlyData struct{}

func (refusedEarlyData) Clone() fwk.StateData { return refusedEarlyData{} }

// quotaReservedData marks a cycle whose allocations a DeviceQuota let in,
// with the epoch it did (draruntime.QuotaReserved): Unreserve, giving them
// up, retries the pods the quota refused after it.
type quotaReservedData struct{ epoch uint64 }

func (d quotaReservedData) Clone() fwk.StateData { return d }

// quotaSteeredData marks a cycle in which devices were hidden from the pod
// for its namespace's DeviceQuotas (steerByQuota), with what the quota
// check saw then and the limit it names: PostFilter retries the pod, if
// no node fits, when the quota changes, and says why devices were hidden.
type quotaSteeredData struct {
	seen draruntime.QuotaSeen
	note string
}

func (d quotaSteeredData) Clone() fwk.StateData { return d }

// mixedAdminData marks a pod that needs admin-access and ordinary requests
// allocated together: Filter's refusals say that upstream charged its
// admin access shared counters (pkg/adminaccess).
type mixedAdminData struct{}

func (mixedAdminData) Clone() fwk.StateData { return mixedAdminData{} }

// whatIfState is the cycle's what-if (pkg/whatif); each clone gets a copy
// of the pods a dry run removed and added.
type whatIfState struct{ *whatif.WhatIf }

func (s whatIfState) Clone() fwk.StateData { return whatIfState{s.WhatIf.Clone()} }

// memoState is the cycle's side of the filter memo (pkg/filtermemo),
// shared by clones: nominated pods' pass and preemption's dry runs read the
// same allocator.
type memoState struct{ *filtermemo.Cycle }

func (s memoState) Clone() fwk.StateData { return s }

// shortageState is what PostFilter counts a refused pod's shortage from
// (nodeprune.FindShortage): the claims, and the in-use set and slices the
// cycle's allocator was built from. Shared by clones: only read.
type shortageState struct {
	claims []*resourceapi.ResourceClaim
	view   nodeprune.View
}

func (s *shortageState) Clone() fwk.StateData { return s }

// scoringState is what PreScore gathered for NormalizeScore.
type scoringState struct {
	// requested is how many devices the pod's claims still to allocate
	// ask for.
	requested int
	// use is, per feasible node, the devices of its node-local pools.
	use map[string]devicescore.Use
}

// Clone shares the state: it is only read after PreScore.
func (s *scoringState) Clone() fwk.StateData { return s }

// signalled are the claim UIDs of the in-flight allocations a pod uses
// after Reserve (reserve.go).
type signalled struct{ uids []types.UID }

func (s signalled) Clone() fwk.StateData { return s }

// gangAttemptState is what the members' PreFilters of one pod-group cycle
// leave for PodGroupPostFilter, in the pod-group cycle's state; shared:
// members record themselves in one place.
type gangAttemptState struct{ *gangplan.Attempt }

func (s gangAttemptState) Clone() fwk.StateData { return s }

// fromCycle returns what a cycle's earlier extension point wrote under key,
// as T; false when the cycle has no state (a caller outside a cycle, such
// as a test or the preemption dry run), nothing under key, or something
// else.
func fromCycle[T fwk.StateData](state fwk.CycleState, key fwk.StateKey) (T, bool) {
	var zero T
	if state == nil {
		return zero, false
	}
	data, err := state.Read(key)
	if err != nil {
		return zero, false
	}
	t, ok := data.(T)
	return t, ok
}

// whatIfIn is the cycle's what-if, or nil.
func whatIfIn(state fwk.CycleState) *whatif.WhatIf {
	s, _ := fromCycle[whatIfState](state, whatIfKey)
	return s.WhatIf
}

// memoIn is the cycle's filter memo, or nil.
func memoIn(state fwk.CycleState) *filtermemo.Cycle {
	s, _ := fromCycle[memoState](state, memoKey)
	return s.Cycle
}

// withheldIn is the cycle's withheld devices, or a fresh view for a Filter
// called without it (every withheld device named).
func withheldIn(state fwk.CycleState) *withheld.Cycle {
	if s, ok := fromCycle[withheldState](state, withheldKey); ok {
		return s.Cycle
	}
	return withheld.NewCycle(nil, false)
}

// refusedEarly reports whether pruneFirst refused the cycle's pod.
func refusedEarly(state fwk.CycleState) bool {
	_, ok := fromCycle[refusedEarlyData](state, refusedEarlyKey)
	return ok
}

// gangAttemptOf returns the pod-group cycle's attempt, creating it; nil
// outside a pod-group cycle.
func gangAttemptOf(state fwk.CycleState) *gangplan.Attempt {
	group := state.GetPodGroupSchedulingCycle()
	if group == nil {
		return nil
	}
	if attempt := attemptIn(group); attempt != nil {
		return attempt
	}
	attempt := &gangplan.Attempt{}
	group.Write(gangAttemptKey, gangAttemptState{attempt})
	return attempt
}

// attemptIn is the pod-group cycle's attempt, or nil.
func attemptIn(state fwk.PodGroupCycleState) *gangplan.Attempt {
	if state == nil {
		return nil
	}
	data, err := state.Read(gangAttemptKey)
	if err != nil {
		return nil
	}
	s, _ := data.(gangAttemptState)
	return s.Attempt
}
