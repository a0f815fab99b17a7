package kubectldra

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/health"
)

// staleAfter is how long a ResourcePool may miss a change of its pool
// before kubectl dra says so: the scheduler's default
// poolStatus.maxPublishDelay, within which it writes every change.
const staleAfter = 10 * time.Second

// maxStaleNamed bounds how many stale ResourcePools the note names.
const maxStaleNamed = 3

// staleNote says which ResourcePools were last written before a change of
// their pool's slices or claims more than staleAfter old, and still count
// its devices differently from a recount of those slices and claims: no
// replica keeps them current, or the publisher is far behind. A change
// that leaves the counts alone (a claim's reservedFor) is not one the
// object misses. It is "" when none is stale, or when the user may not
// read every slice and claim (the recount would be wrong). A deleted claim
// leaves no time to compare with, so a deallocation by deletion is not
// caught.
func (s *poolSource) staleNote(ctx context.Context, pools []v1alpha1.ResourcePool) (string, error) {
	if len(pools) == 0 {
		return "", nil
	}
	view, err := s.load(ctx)
	if err != nil || view.slicesHidden || view.claimsHidden || view.claimsNamespaces != nil {
		return "", err
	}
	changed := map[drausage.PoolID]time.Time{}
	note := func(id drausage.PoolID, obj metav1.Object) {
		if at := lastChanged(obj); at.After(changed[id]) {
			changed[id] = at
		}
	}
	for _, slice := range view.slices {
		note(drausage.PoolID{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name}, slice)
	}
	for _, claim := range view.claims {
		for _, id := range drausage.PoolsOf(claim) {
			note(id, claim)
		}
	}
	recount := map[drausage.PoolID]drausage.PoolUsage{}
	for _, usage := range drausage.ComputePoolUsage(view.slices, view.claims, drausage.Options{DeviceTaintRules: view.taintRules}) {
		recount[usage.PoolID] = usage
	}
	var stale []string
	for i := range pools {
		rp := &pools[i]
		id := drausage.PoolID{Driver: rp.Spec.Driver, Pool: rp.Spec.PoolName}
		at, usage := changed[id], recount[id]
		written := rp.CreationTimestamp.Time
		if rp.Status.LastUpdateTime != nil {
			written = rp.Status.LastUpdateTime.Time
		}
		if at.IsZero() || !written.Before(at) || s.now.Sub(at) <= staleAfter {
			continue
		}
		sum := summaryOf(rp)
		got := [3]int32{sum.TotalDevices, sum.AllocatedDevices, sum.PartiallyAllocatedDevices}
		want := [3]int32{int32(usage.Summary.Total), int32(usage.Summary.Allocated), int32(usage.Summary.PartiallyAllocated)}
		if got != want {
			stale = append(stale, fmt.Sprintf("%s (written %s before its pool changed %s ago; it counts %d allocated of %d, the claims %d of %d)",
				rp.Name, at.Sub(written).Round(time.Second), s.now.Sub(at).Round(time.Second), got[1], got[0], want[1], want[0]))
		}
	}
	if len(stale) == 0 {
		return "", nil
	}
	named := stale[:min(len(stale), maxStaleNamed)]
	more := ""
	if len(stale) > len(named) {
		more = fmt.Sprintf(", and %d more", len(stale)-len(named))
	}
	return fmt.Sprintf("Warning: %d ResourcePool(s) missed a change of their pool more than %s ago: %s%s. Is a drascope-scheduler publishing them? (its metric drascope_resourcepool_publishing; alert DRAResourcePoolsNotPublished)",
		len(stale), staleAfter, strings.Join(named, "; "), more), nil
}

// lastChanged is when an object was last written, as far as its metadata
// says: its creation, or its latest managed-fields entry.
func lastChanged(obj metav1.Object) time.Time {
	at := obj.GetCreationTimestamp().Time
	for _, entry := range obj.GetManagedFields() {
		if entry.Time != nil && entry.Time.After(at) {
			at = entry.Time.Time
		}
	}
	return at
}

// schedulerLease is the Lease the drascope-scheduler replica leading
// scheduling holds (the shipped leaderElection settings).
const (
	schedulerLeaseNamespace = "kube-system"
	schedulerLeaseName      = "drascope-scheduler"
)

// orphanedRulesNote warns about the DeviceTaintRules drascope-scheduler
// wrote (health.ManagedByLabel) when no drascope-scheduler leads: the rules
// have no owner, and only a running leader ends them at their hold time,
// so after an uninstall (or while drascope is scaled to zero) they keep
// their devices NoSchedule for every scheduler. Only rules that select a
// device of the listed pools count. It is "" when there are none, a
// replica renews the Lease, there is no Lease (a single replica without
// leader election makes none; an uninstall leaves it behind), or the user
// may not read it.
func (s *poolSource) orphanedRulesNote(ctx context.Context, pools []v1alpha1.ResourcePool) (string, error) {
	if len(pools) == 0 {
		return "", nil
	}
	view, err := s.load(ctx)
	if err != nil {
		return "", err
	}
	listed := map[drausage.PoolID]bool{}
	for i := range pools {
		listed[drausage.PoolID{Driver: pools[i].Spec.Driver, Pool: pools[i].Spec.PoolName}] = true
	}
	n := 0
	for _, rule := range view.taintRules {
		sel := rule.Spec.DeviceSelector
		if health.HasOwnLabel(rule) && sel != nil && sel.Driver != nil && sel.Pool != nil && listed[drausage.PoolID{Driver: *sel.Driver, Pool: *sel.Pool}] {
			n++
		}
	}
	if n == 0 {
		return "", nil
	}
	lease, err := s.client.CoordinationV1().Leases(schedulerLeaseNamespace).Get(ctx, schedulerLeaseName, metav1.GetOptions{})
	var why string
	switch {
	case err != nil:
		return "", nil // none, or not this user's to read: say nothing
	default:
		renewed := lease.Spec.RenewTime
		duration := time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 15)) * time.Second
		if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" && renewed != nil && s.now.Sub(renewed.Time) <= duration {
			return "", nil
		}
		why = "nobody renews the Lease " + schedulerLeaseNamespace + "/" + schedulerLeaseName
		if renewed != nil {
			why += fmt.Sprintf(" (last renewed %s ago)", s.now.Sub(renewed.Time).Round(time.Second))
		}
	}
	return fmt.Sprintf("Warning: %d DeviceTaintRule(s) written by drascope-scheduler keep their devices NoSchedule for every scheduler, and %s: no drascope-scheduler leads to end them at their hold time. If drascope-scheduler was uninstalled, delete them: kubectl delete devicetaintrules -l %s=%s",
		n, why, health.ManagedByLabel, health.ManagedBy), nil
}
