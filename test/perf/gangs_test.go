package perf

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/test/perf/results"
)

// gangNamespace is where the Gangs test case creates its PodGroups and
// their members.
const gangNamespace = "gangs"

// countGangs records the Gangs test case's gangs (the pods of namespace
// gangs, by PodGroup): how many, how many placed whole, the members
// placed, the partial ones, and the time from the first member's creation
// until the last bound member's PodScheduled condition. A gang is partial
// when some of its members are bound and others are not, or when a claim
// of an unbound member is allocated: the all-or-nothing promise broken.
func countGangs(ctx context.Context, client kubernetes.Interface, entry *results.IndexEntry) error {
	pods, err := client.CoreV1().Pods(gangNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		return err
	}
	claims, err := client.ResourceV1().ResourceClaims(gangNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	allocatedFor := map[string]bool{}
	for _, claim := range claims.Items {
		if owner := metav1.GetControllerOf(&claim); owner != nil && owner.Kind == "Pod" && claim.Status.Allocation != nil {
			allocatedFor[owner.Name] = true
		}
	}
	type gang struct{ members, bound, heldUnbound int }
	gangs := map[string]*gang{}
	var first, last time.Time
	for _, pod := range pods.Items {
		name := ptr.Deref(ptr.Deref(pod.Spec.SchedulingGroup, v1.PodSchedulingGroup{}).PodGroupName, "")
		g := gangs[name]
		if g == nil {
			g = &gang{}
			gangs[name] = g
		}
		g.members++
		if first.IsZero() || pod.CreationTimestamp.Time.Before(first) {
			first = pod.CreationTimestamp.Time
		}
		if pod.Spec.NodeName == "" {
			if allocatedFor[pod.Name] {
				g.heldUnbound++
			}
			continue
		}
		g.bound++
		entry.GangMembersPlaced++
		if at := scheduledAt(&pod); at.After(last) {
			last = at
		}
	}
	for _, g := range gangs {
		entry.Gangs++
		switch {
		case g.bound == g.members:
			entry.GangsPlaced++
		case g.bound > 0 || g.heldUnbound > 0:
			entry.PartialGangs++
		}
	}
	if !last.IsZero() {
		entry.GangSeconds = last.Sub(first).Seconds()
	}
	return nil
}
