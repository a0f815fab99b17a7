package kubectldra

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/kubectl/pkg/describe"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
)

// hiddenClaim stands in the Claim column for a held device none of whose
// claims the user may list.
const hiddenClaim = "<not permitted>"

// printPoolTable writes pools as kubectl get writes a table; wide adds
// partially allocated devices, slices, validity and age.
func printPoolTable(out io.Writer, pools []v1alpha1.ResourcePool, wide bool, now time.Time) error {
	w := printers.GetNewTabWriter(out)
	columns := []string{"NAME", "DRIVER", "POOL", "NODE", "TOTAL", "ALLOCATED", "AVAILABLE", "UNAVAILABLE"}
	if wide {
		columns = append(columns, "PARTIAL", "SLICES", "VALID", "AGE")
	}
	fmt.Fprintln(w, strings.Join(columns, "\t"))
	writePoolRows(w, pools, wide, now)
	return w.Flush()
}

// printPoolRows writes the rows of printPoolTable without its header, as
// kubectl get --watch writes the rows that follow the first table.
func printPoolRows(out io.Writer, pools []v1alpha1.ResourcePool, wide bool, now time.Time) error {
	w := printers.GetNewTabWriter(out)
	writePoolRows(w, pools, wide, now)
	return w.Flush()
}

func writePoolRows(w io.Writer, pools []v1alpha1.ResourcePool, wide bool, now time.Time) {
	for _, rp := range pools {
		sum := summaryOf(&rp)
		row := []string{rp.Name, rp.Spec.Driver, rp.Spec.PoolName, orNone(rp.Spec.NodeName),
			fmt.Sprint(sum.TotalDevices), fmt.Sprint(sum.AllocatedDevices), fmt.Sprint(sum.AvailableDevices), fmt.Sprint(sum.UnavailableDevices)}
		if wide {
			age := "<computed>"
			if !rp.CreationTimestamp.IsZero() {
				age = duration.HumanDuration(now.Sub(rp.CreationTimestamp.Time))
			}
			row = append(row, fmt.Sprint(sum.PartiallyAllocatedDevices),
				fmt.Sprintf("%d/%d", rp.Status.ObservedSliceCount, rp.Status.ExpectedSliceCount), validOf(&rp), age)
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
	}
}

// rowKey is what a pool's table row says, age aside: a pool is printed
// again under --watch when it changes.
func rowKey(rp *v1alpha1.ResourcePool) string {
	sum := summaryOf(rp)
	return fmt.Sprint(rp.Spec, *sum, rp.Status.ObservedSliceCount, rp.Status.ExpectedSliceCount, validOf(rp))
}

// printPool writes a pool as kubectl describe writes an object: counts,
// conditions, slices, validation errors, devices, then events.
func printPool(out io.Writer, rp *v1alpha1.ResourcePool, detail *drausage.PoolUsage, detailNote string, events []eventsv1.Event, now time.Time) error {
	tw := printers.GetNewTabWriter(out)
	w := describe.NewPrefixWriter(tw)
	w.Write(describe.LEVEL_0, "Name:\t%s\n", rp.Name)
	w.Write(describe.LEVEL_0, "Driver:\t%s\n", rp.Spec.Driver)
	w.Write(describe.LEVEL_0, "Pool:\t%s\n", rp.Spec.PoolName)
	w.Write(describe.LEVEL_0, "Node:\t%s\n", orNone(rp.Spec.NodeName))
	sum := summaryOf(rp)
	w.Write(describe.LEVEL_0, "Summary:\n")
	w.Write(describe.LEVEL_1, "Total:\t%d\n", sum.TotalDevices)
	w.Write(describe.LEVEL_1, "Allocated:\t%d\n", sum.AllocatedDevices)
	w.Write(describe.LEVEL_1, "Partially Allocated:\t%d\n", sum.PartiallyAllocatedDevices)
	w.Write(describe.LEVEL_1, "Available:\t%d\n", sum.AvailableDevices)
	w.Write(describe.LEVEL_1, "Unavailable:\t%d\n", sum.UnavailableDevices)
	w.Write(describe.LEVEL_0, "Conditions:\n")
	w.Write(describe.LEVEL_1, "Type\tStatus\tReason\tMessage\n")
	w.Write(describe.LEVEL_1, "----\t------\t------\t-------\n")
	for _, c := range rp.Status.Conditions {
		w.Write(describe.LEVEL_1, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	w.Write(describe.LEVEL_0, "Slices:\t%d of %d\n", rp.Status.ObservedSliceCount, rp.Status.ExpectedSliceCount)
	w.Write(describe.LEVEL_0, "Generation:\t%d\n", rp.Status.ObservedGeneration)
	if rp.Status.LastUpdateTime != nil {
		w.Write(describe.LEVEL_0, "Last Update:\t%s\n", rp.Status.LastUpdateTime.Format(time.RFC1123Z))
	} else {
		w.Write(describe.LEVEL_0, "Last Update:\t<computed now>\n")
	}
	if len(rp.Status.ValidationErrors) == 0 {
		w.Write(describe.LEVEL_0, "Validation Errors:\t<none>\n")
	} else {
		w.Write(describe.LEVEL_0, "Validation Errors:\n")
		for _, e := range rp.Status.ValidationErrors {
			w.Write(describe.LEVEL_1, "%s\n", e)
		}
		if rp.Status.TruncatedErrorCount > 0 {
			w.Write(describe.LEVEL_1, "(%d more not listed)\n", rp.Status.TruncatedErrorCount)
		}
	}
	if c := rp.Status.Conflicts; c != nil {
		w.Write(describe.LEVEL_0, "Allocation Conflicts:\n")
		w.Write(describe.LEVEL_1, "Over-allocated Devices:\t%d\n", c.OverAllocatedDevices)
		w.Write(describe.LEVEL_1, "Over-consumed Capacity:\t%d\n", c.OverConsumedCapacity)
		w.Write(describe.LEVEL_1, "Over-consumed Counters:\t%d\n", c.OverConsumedCounters)
	}

	if detail != nil && len(detail.PhysicalDevices) > 0 {
		writePhysicalDevices(w, detail)
	}
	if detail == nil {
		w.Write(describe.LEVEL_0, "Device Details:\t%s\n", detailNote)
	} else {
		w.Write(describe.LEVEL_0, "Device Details:\n")
		if detailNote != "" {
			w.Write(describe.LEVEL_1, "%s\n", detailNote)
		}
		writeDevices(w, describe.LEVEL_1, detail, detailNote)
	}

	if len(events) == 0 {
		w.Write(describe.LEVEL_0, "Events:\t<none>\n")
	} else {
		w.Write(describe.LEVEL_0, "Events:\n")
		w.Write(describe.LEVEL_1, "Type\tReason\tAge\tSlice\tMessage\n")
		w.Write(describe.LEVEL_1, "----\t------\t---\t-----\t-------\n")
		for _, e := range events {
			w.Write(describe.LEVEL_1, "%s\t%s\t%s\t%s\t%s\n", e.Type, e.Reason, duration.HumanDuration(now.Sub(eventTime(e))), e.Regarding.Name, strings.TrimSpace(e.Note))
		}
	}
	return tw.Flush()
}

// pooledDetail is one pool's device detail, or the note saying why there is
// none.
type pooledDetail struct {
	detail *drausage.PoolUsage
	note   string
}

// printNode writes the DRA pools of a node, and with details (one per pool,
// --show-devices) their devices.
func printNode(out io.Writer, node string, pools []v1alpha1.ResourcePool, details []pooledDetail) error {
	tw := printers.GetNewTabWriter(out)
	w := describe.NewPrefixWriter(tw)
	w.Write(describe.LEVEL_0, "Name:\t%s\n", node)
	if len(pools) == 0 {
		w.Write(describe.LEVEL_0, "DRA Resources:\t<none>\n")
		return tw.Flush()
	}
	w.Write(describe.LEVEL_0, "DRA Resources:\n")
	w.Write(describe.LEVEL_1, "Pool\tDriver\tTotal\tAllocated\tAvailable\tUnavailable\tValid\n")
	w.Write(describe.LEVEL_1, "----\t------\t-----\t---------\t---------\t-----------\t-----\n")
	for _, rp := range pools {
		sum := summaryOf(&rp)
		w.Write(describe.LEVEL_1, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", rp.Spec.PoolName, rp.Spec.Driver,
			sum.TotalDevices, sum.AllocatedDevices, sum.AvailableDevices, sum.UnavailableDevices, validOf(&rp))
	}
	for i, d := range details {
		w.Write(describe.LEVEL_0, "Devices of %s:\n", pools[i].Name)
		if d.detail != nil && d.note != "" {
			w.Write(describe.LEVEL_1, "%s\n", d.note)
		}
		writeDevices(w, describe.LEVEL_1, d.detail, d.note)
	}
	return tw.Flush()
}

// summaryOf is a pool's summary; all zero before the scheduler wrote one.
func summaryOf(rp *v1alpha1.ResourcePool) *v1alpha1.PoolSummary {
	if rp.Status.Summary == nil {
		return &v1alpha1.PoolSummary{}
	}
	return rp.Status.Summary
}

// validOf is the status of a pool's Valid condition, Unknown without one.
func validOf(rp *v1alpha1.ResourcePool) string {
	if c := meta.FindStatusCondition(rp.Status.Conditions, v1alpha1.ConditionValid); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

// writeDevices writes a device detail table, or the note saying why there is none.
func writeDevices(w describe.PrefixWriter, level int, detail *drausage.PoolUsage, note string) {
	if detail == nil {
		w.Write(level, "%s\n", note)
		return
	}
	w.Write(level, "Device\tState\tHealth\tClaim\tDetails\n")
	w.Write(level, "------\t-----\t------\t-----\t-------\n")
	for _, d := range detail.Devices {
		claims := make([]string, 0, len(d.Allocations))
		var details []string
		for _, a := range d.Allocations {
			claims = append(claims, a.Claim.String())
			if len(a.ConsumedCapacity) > 0 {
				details = append(details, a.Claim.String()+" consumes "+capacityString(a))
			}
		}
		for _, a := range d.AdminAccess {
			details = append(details, "observed by "+a.Claim.String()+" (admin access)")
		}
		if len(d.Capacity) > 0 {
			details = append(details, "capacity "+capacityUseString(d.Capacity))
		}
		switch {
		case d.Reason != "":
			details = append([]string{d.Unavailability()}, details...)
		case d.Health.Status == v1.ResourceHealthStatusUnhealthy:
			details = append([]string{d.Health.Detail}, details...)
		}
		health := d.Health.Status
		if health == "" {
			health = v1.ResourceHealthStatusUnknown
		}
		claim := orNone(strings.Join(claims, ", "))
		if len(claims) == 0 && (d.State == drausage.DeviceAllocated || d.State == drausage.DevicePartiallyAllocated) {
			claim = hiddenClaim
		}
		w.Write(level, "%s\t%s\t%s\t%s\t%s\n", d.Name, d.State, health, claim, strings.Join(details, "; "))
	}
}

func eventTime(e eventsv1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func capacityString(a drausage.Allocation) string {
	parts := make([]string, 0, len(a.ConsumedCapacity))
	for name, q := range a.ConsumedCapacity {
		parts = append(parts, fmt.Sprintf("%s=%s", name, q.String()))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// capacityUseString says how much of each capacity of a shared device is
// used, as "memory 12Gi/16Gi used".
func capacityUseString(uses []drausage.CapacityUse) string {
	parts := make([]string, 0, len(uses))
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s %s/%s used", u.Name, u.Used.String(), u.Total.String()))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// writePhysicalDevices shows how each physical device (shared counter set,
// KEP-4815) of a pool is split: what its partitions consume of it, and
// which are allocated. Whole devices free are those that a pod wanting a
// whole device can still get.
func writePhysicalDevices(w describe.PrefixWriter, detail *drausage.PoolUsage) {
	untouched := 0
	for i := range detail.PhysicalDevices {
		if detail.PhysicalDevices[i].Untouched() {
			untouched++
		}
	}
	w.Write(describe.LEVEL_0, "Physical Devices:\t%d of %d untouched (whole devices free in the pool: %d)\n", untouched, len(detail.PhysicalDevices), detail.WholeDevicesFree)
	w.Write(describe.LEVEL_1, "Counter Set\tConsumed\tAllocated Partitions\n")
	w.Write(describe.LEVEL_1, "-----------\t--------\t--------------------\n")
	for _, pd := range detail.PhysicalDevices {
		consumed := make([]string, 0, len(pd.Counters))
		for _, c := range pd.Counters {
			consumed = append(consumed, fmt.Sprintf("%s %s/%s", c.Name, c.Used.String(), c.Total.String()))
		}
		partitions := "<none>"
		if len(pd.Partitions) > 0 {
			partitions = strings.Join(pd.Partitions, ", ")
		}
		w.Write(describe.LEVEL_1, "%s\t%s\t%s\n", pd.Name, strings.Join(consumed, ", "), partitions)
	}
}
