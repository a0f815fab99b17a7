// Package poolstatus renders drausage pool usage as ResourcePool status. The
// publisher and kubectl dra share it, so both say the same thing.
package poolstatus

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
)

// MaxDeviceBytes bounds the encoded size (JSON) of a status's device list,
// with the entries it adds to the object's managedFields: under etcd's
// default request limit (1.5 MiB), with 256 KiB for the rest of the
// object. A pool of a thousand
// Unhealthy or tainted devices with long messages would otherwise make a
// status the apiserver refuses, retried forever, and its object would
// freeze.
const MaxDeviceBytes = 5 << 18 // 1.25 MiB

// listedDevices are the devices a status lists: every one that is not
// Available or was reported Unhealthy, sorted by name, at most
// v1alpha1.MaxDevices and MaxDeviceBytes encoded. Past that (a pool of
// thousands of devices, tainted or allocated, or long messages),
// Unhealthy and Unavailable devices are kept before allocated ones, which
// the summary counts anyway, and the rest are counted: a status the CRD or
// the apiserver refuses would be retried forever.
func listedDevices(devices []drausage.DeviceUsage) ([]v1alpha1.DeviceStatus, int32) {
	var listed []v1alpha1.DeviceStatus
	worstCase := 0
	for _, d := range devices {
		if d.State != drausage.DeviceAvailable || d.Health.Status == v1.ResourceHealthStatusUnhealthy {
			s := v1alpha1.DeviceStatus{
				Name: d.Name, State: string(d.State), Reason: string(d.Reason), Message: d.Message,
				Health: string(d.Health.Status), HealthMessage: d.Health.Detail,
			}
			listed = append(listed, s)
			worstCase += maxEncodedSize(s)
		}
	}
	if len(listed) <= v1alpha1.MaxDevices && worstCase <= MaxDeviceBytes {
		return listed, 0
	}
	important := func(d v1alpha1.DeviceStatus) bool {
		return d.Health == string(v1.ResourceHealthStatusUnhealthy) || d.State == string(drausage.DeviceUnavailable)
	}
	slices.SortStableFunc(listed, func(a, b v1alpha1.DeviceStatus) int {
		switch {
		case important(a) && !important(b):
			return -1
		case important(b) && !important(a):
			return 1
		}
		return 0
	})
	kept, size := 0, 0
	for _, d := range listed[:min(len(listed), v1alpha1.MaxDevices)] {
		n := encodedSize(d)
		if size+n > MaxDeviceBytes {
			break
		}
		kept, size = kept+1, size+n
	}
	truncated := int32(len(listed) - kept)
	listed = listed[:kept]
	slices.SortFunc(listed, func(a, b v1alpha1.DeviceStatus) int { return cmp.Compare(a.Name, b.Name) })
	return listed, truncated
}

// deviceOverhead is what JSON adds to a device's strings: its keys,
// quotes, colons, commas and braces.
const deviceOverhead = len(`{"name":"","state":"","reason":"","message":"","health":"","healthMessage":""},`)

// maxEncodedSize bounds a device's JSON size without encoding it: a byte
// is escaped to at most six (\u00XX).
func maxEncodedSize(d v1alpha1.DeviceStatus) int {
	return deviceOverhead + 6*(len(d.Name)+len(d.State)+len(d.Reason)+len(d.Message)+len(d.Health)+len(d.HealthMessage)) + managedFieldsSize(d)
}

// encodedSize is a device's JSON size, and a separator, and what its entry
// adds to the object's managedFields: status.devices is a map list, so
// each device is a field of its own there.
func encodedSize(d v1alpha1.DeviceStatus) int {
	data, err := json.Marshal(d)
	if err != nil {
		return maxEncodedSize(d)
	}
	return len(data) + 1 + managedFieldsSize(d)
}

// managedFieldsSize is a device's entry in managedFields:
// "k:{\"name\":\"NAME\"}":{".":{},"f:name":{},"f:state":{},...},
// with a field for each one set.
func managedFieldsSize(d v1alpha1.DeviceStatus) int {
	size := len(`"k:{\"name\":\"\"}":{".":{},"f:name":{},"f:state":{}},`) + 2*len(d.Name)
	for field, value := range map[string]string{"reason": d.Reason, "message": d.Message, "health": d.Health, "healthMessage": d.HealthMessage} {
		if value != "" {
			size += len(`"f:":{},`) + len(field)
		}
	}
	return size
}

// For renders a pool's usage as a ResourcePool status, counted under the
// scheduler's deviceHealth.policy (empty when not known, as for a pool
// computed client side). Given the previous status, it keeps the transition
// times of unchanged conditions, and the lastUpdateTime when nothing else
// changed.
func For(snap *drausage.PoolUsage, healthPolicy string, previous *v1alpha1.ResourcePoolStatus, now time.Time) *v1alpha1.ResourcePoolStatus {
	s := snap.Summary
	status := &v1alpha1.ResourcePoolStatus{
		Summary: &v1alpha1.PoolSummary{
			TotalDevices:              int32(s.Total),
			AllocatedDevices:          int32(s.Allocated),
			AvailableDevices:          int32(s.Available),
			UnavailableDevices:        int32(s.Unavailable),
			PartiallyAllocatedDevices: int32(s.PartiallyAllocated),
		},
		ObservedSliceCount: int32(snap.ObservedSlices),
		ExpectedSliceCount: int32(snap.ExpectedSlices),
		ObservedGeneration: snap.Generation,
		LastUpdateTime:     &metav1.Time{Time: now.Truncate(time.Second)},
		DeviceHealthPolicy: healthPolicy,
	}
	status.Devices, status.TruncatedDeviceCount = listedDevices(snap.Devices)
	// Missing slices are the Complete condition's business; Valid counts
	// the other problems. Conflicts follow the slices' problems within
	// the same cap, and are counted apart in full.
	var invalid []string
	for _, e := range snap.ValidationErrors {
		status.ValidationErrors = append(status.ValidationErrors, e.Message)
		if e.Kind != drausage.MissingSlices {
			invalid = append(invalid, e.Message)
		}
	}
	truncated := snap.TruncatedErrorCount
	for _, c := range snap.Conflicts {
		if len(status.ValidationErrors) >= drausage.MaxValidationErrors {
			truncated++
			continue
		}
		status.ValidationErrors = append(status.ValidationErrors, c.Message)
		invalid = append(invalid, c.Message)
	}
	status.TruncatedErrorCount = int32(truncated)
	if len(snap.Conflicts) > 0 {
		counts := snap.ConflictCounts()
		status.Conflicts = &v1alpha1.AllocationConflicts{
			OverAllocatedDevices: int32(counts[drausage.OverAllocatedDevice]),
			OverConsumedCapacity: int32(counts[drausage.OverConsumedCapacity]),
			OverConsumedCounters: int32(counts[drausage.OverConsumedCounter]),
		}
	}
	var old []metav1.Condition
	if previous != nil {
		old = previous.Conditions
	}
	status.Conditions = []metav1.Condition{
		condition(old, v1alpha1.ConditionComplete, snap.Complete(), "AllSlicesPresent", "SlicesMissing",
			fmt.Sprintf("%d of %d slices at generation %d", snap.ObservedSlices, snap.ExpectedSlices, snap.Generation), now),
		condition(old, v1alpha1.ConditionValid, snap.Valid(), "ValidationPassed", "ValidationFailed",
			validMessage(invalid, truncated), now),
	}
	if previous != nil && Equal(previous, status) {
		status.LastUpdateTime = previous.LastUpdateTime
	}
	return status
}

func validMessage(invalid []string, truncated int) string {
	switch {
	case len(invalid) == 0 && truncated == 0:
		return "no problems found across the pool's slices and allocations"
	case truncated > 0:
		return fmt.Sprintf("%d problem(s), %d not listed; see validationErrors", len(invalid)+truncated, truncated)
	default:
		return fmt.Sprintf("%d problem(s); see validationErrors", len(invalid))
	}
}

func condition(old []metav1.Condition, typ string, ok bool, trueReason, falseReason, message string, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: falseReason, Message: message, LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}
	if ok {
		c.Status, c.Reason = metav1.ConditionTrue, trueReason
	}
	if prev := meta.FindStatusCondition(old, typ); prev != nil && prev.Status == c.Status {
		c.LastTransitionTime = prev.LastTransitionTime
	}
	return c
}

// Equal compares statuses, ignoring lastUpdateTime.
func Equal(a, b *v1alpha1.ResourcePoolStatus) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	x.LastUpdateTime, y.LastUpdateTime = nil, nil
	byType := func(a, b metav1.Condition) int { return cmp.Compare(a.Type, b.Type) }
	slices.SortFunc(x.Conditions, byType)
	slices.SortFunc(y.Conditions, byType)
	return apiequality.Semantic.DeepEqual(x, y)
}
