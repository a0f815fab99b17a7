package health

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Under deviceHealth.policy Taint, each Unhealthy device is also a
// DeviceTaintRule (resource.k8s.io/v1): every scheduler, upstream's
// included, then avoids it, and a restarted drascope remembers it. The rule
// is the persisted form of a Report; these are its names.
const (
	// TaintKey is the key of the NoSchedule taint drascope puts on
	// Unhealthy devices. A pod that must reach such a device (a
	// monitoring pod with admin access) tolerates it in its claim.
	TaintKey = "drascope.dev/unhealthy"
	// ManagedByLabel and ManagedBy mark the rules drascope writes; it
	// never touches a rule without them.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "drascope-scheduler"

	annotationPrefix = "drascope.dev/"
	// AnnotationReportedBy named the reporting pod (namespace/name) in
	// rules of earlier releases. A rule is cluster-scoped and the pod
	// belongs to a tenant, so it is no longer written: it is read from an
	// old rule, and dropped at the rule's next sync.
	AnnotationReportedBy = annotationPrefix + "reported-by"
	// AnnotationReporter is the reporting pod's UID, which names no tenant
	// and is all a restarted scheduler needs to match the pod's later
	// reports.
	AnnotationReporter   = annotationPrefix + "reporter-uid"
	AnnotationNode       = annotationPrefix + "node"
	AnnotationReportedAt = annotationPrefix + "reported-at"
	AnnotationMessage    = annotationPrefix + "message"
	AnnotationHeldUntil  = annotationPrefix + "held-until"
	// AnnotationClearRequested, set by an operator on a rule drascope wrote
	// (kubectl dra health clear), ends the device's Unhealthy state as it
	// stood at that time (RFC 3339); drascope then deletes the rule. The
	// apiserver's audit log records who set it.
	AnnotationClearRequested = annotationPrefix + "clear-requested-at"

	// maxRuleMessage bounds kubelet's message in a rule annotation.
	maxRuleMessage = 1024
)

// RuleName is the name of the rule for a device: readable where it can
// be, and unique through a hash of the whole device name (pool names may
// hold slashes and be long).
func RuleName(d Device) string {
	sum := sha256.Sum256([]byte(d.String()))
	return "drascope-unhealthy-" + truncateName(d.Name, 40) + "-" + hex.EncodeToString(sum[:])[:12]
}

func truncateName(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	for len(s) > 0 && (s[len(s)-1] == '-' || s[len(s)-1] == '.') {
		s = s[:len(s)-1]
	}
	return s
}

// HasOwnLabel reports whether a rule carries drascope's label: drascope
// manages it, and deletes it unless it is exactly one it writes (isOwnRule).
func HasOwnLabel(rule *resourceapi.DeviceTaintRule) bool {
	return rule.Labels[ManagedByLabel] == ManagedBy
}

// isOwnRule reports whether the rule is one drascope writes: its label, its
// taint key, and the name that belongs to the device it selects. A rule
// edited to select another device is not the persisted report of either.
func isOwnRule(rule *resourceapi.DeviceTaintRule) bool {
	if !HasOwnLabel(rule) || rule.Spec.Taint.Key != TaintKey {
		return false
	}
	d, ok := deviceOfRule(rule)
	return ok && rule.Name == RuleName(d)
}

// RuleFor is the rule that persists an Unhealthy report.
func RuleFor(r Report) *resourceapi.DeviceTaintRule {
	annotations := map[string]string{
		AnnotationReporter:   string(r.PodUID),
		AnnotationNode:       r.Node,
		AnnotationReportedAt: r.Since.UTC().Format(time.RFC3339),
	}
	if r.Message != "" {
		annotations[AnnotationMessage] = truncate(r.Message, maxRuleMessage)
	}
	if !r.HeldUntil.IsZero() {
		annotations[AnnotationHeldUntil] = r.HeldUntil.UTC().Format(time.RFC3339)
	}
	return &resourceapi.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{
			Name:        RuleName(r.Device),
			Labels:      map[string]string{ManagedByLabel: ManagedBy},
			Annotations: annotations,
		},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{
				Driver: ptr.To(r.Device.Driver),
				Pool:   ptr.To(r.Device.Pool),
				Device: ptr.To(r.Device.Name),
			},
			Taint: resourceapi.DeviceTaint{Key: TaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule},
		},
	}
}

// deviceOfRule returns the device an own rule selects.
func deviceOfRule(rule *resourceapi.DeviceTaintRule) (Device, bool) {
	sel := rule.Spec.DeviceSelector
	if sel == nil || sel.Driver == nil || sel.Pool == nil || sel.Device == nil {
		return Device{}, false
	}
	return Device{Driver: *sel.Driver, Pool: *sel.Pool, Name: *sel.Device}, true
}

// DeviceOfRule returns the device a rule drascope wrote selects.
func DeviceOfRule(rule *resourceapi.DeviceTaintRule) (Device, bool) {
	if !isOwnRule(rule) {
		return Device{}, false
	}
	return deviceOfRule(rule)
}

// desiredRule is the rule the device should have now; nil: none.
func (c *Cache) desiredRule(d Device) *resourceapi.DeviceTaintRule {
	r, ok := c.Get(d)
	if !ok || r.Health != v1.ResourceHealthStatusUnhealthy {
		return nil
	}
	return RuleFor(r)
}

// Restore takes a rule drascope wrote, before any pod is observed, as the
// state it persists: the device is Unhealthy, held until the rule's
// held-until time, or, without one, for as long as the pod that reported
// it still reports it. That pod is believed without the holder check, which
// it passed when the rule was written: its claims are usually gone by now.
func (c *Cache) Restore(logger klog.Logger, rule *resourceapi.DeviceTaintRule) {
	c.takeRule(logger, rule, true)
}

// Adopt is Restore for a process that starts leading after having observed
// pods all along: a rule the previous leader wrote about a device this
// process does not hold Unhealthy (it may have started after the report,
// when the reporter's claims were already released) is held for a hold time
// from now, or until the rule's held-until time; a newer report this
// process has (a Healthy one) wins.
func (c *Cache) Adopt(logger klog.Logger, rule *resourceapi.DeviceTaintRule) {
	c.takeRule(logger, rule, false)
}

func (c *Cache) takeRule(logger klog.Logger, rule *resourceapi.DeviceTaintRule, atStart bool) {
	d, ok := DeviceOfRule(rule)
	if !ok {
		return
	}
	since, err := time.Parse(time.RFC3339, rule.Annotations[AnnotationReportedAt])
	if err != nil {
		since = rule.CreationTimestamp.Time
	}
	if at, cleared := ClearRequested(rule); cleared && !since.Truncate(time.Second).After(at) {
		// An operator cleared the state it persists.
		return
	}
	now := c.opts.Clock.Now()
	var heldUntil time.Time
	if value, ok := rule.Annotations[AnnotationHeldUntil]; ok {
		if heldUntil, err = time.Parse(time.RFC3339, value); err != nil {
			// A hand-edited time: hold from now, as for a report that
			// just went away.
			heldUntil = now.Add(c.opts.HoldTime)
		}
	} else if !atStart {
		heldUntil = now.Add(c.opts.HoldTime)
	}
	uid := types.UID(rule.Annotations[AnnotationReporter])
	c.mu.Lock()
	if e, ok := c.devices[d]; ok {
		current := effective(e, now)
		if current.Health == v1.ResourceHealthStatusUnhealthy || !current.Since.Before(since) {
			c.mu.Unlock()
			return
		}
	}
	e := c.entryLocked(d)
	e.Health, e.Since, e.HeldUntil, e.Expired = v1.ResourceHealthStatusUnhealthy, since, heldUntil, false
	e.Pod, e.PodUID, e.Node, e.Message = rule.Annotations[AnnotationReportedBy], uid, rule.Annotations[AnnotationNode], rule.Annotations[AnnotationMessage]
	if heldUntil.IsZero() {
		e.holders.Insert(uid)
		if c.restored[uid] == nil {
			c.restored[uid] = sets.New[Device]()
		}
		c.restored[uid].Insert(d)
	}
	c.unhealthy[d] = e
	pod := e.Pod
	c.mu.Unlock()
	logger.V(2).Info("Took an Unhealthy device from its DeviceTaintRule", "device", d, "rule", rule.Name, "pod", pod, "heldUntil", heldUntil, "atStart", atStart)
	c.poke()
	if !atStart && c.opts.OnChange != nil {
		c.opts.OnChange([]Device{d})
	}
}

// Settle is called once every pod that existed at start has been
// observed: restored reporters that no pod confirmed are gone, and the
// hold time of their devices starts now.
func (c *Cache) Settle(logger klog.Logger) {
	now := c.opts.Clock.Now()
	var changed []Device
	c.mu.Lock()
	for uid, devices := range c.restored {
		for d := range devices {
			if c.dropHolderLocked(d, uid, now) {
				changed = append(changed, d)
			}
		}
	}
	clear(c.restored)
	c.mu.Unlock()
	c.changed(logger, changed)
}

// ClearRequested returns when an operator asked to clear the rule's device
// (AnnotationClearRequested): the apiserver's time of the write that set
// the annotation, from the rule's managedFields, so that no client's clock
// decides what is cleared. Without such an entry, the annotation's value;
// failing that, the rule's creation.
func ClearRequested(rule *resourceapi.DeviceTaintRule) (time.Time, bool) {
	value, ok := rule.Annotations[AnnotationClearRequested]
	if !ok {
		return time.Time{}, false
	}
	field := `"f:` + AnnotationClearRequested + `"`
	var at time.Time
	for _, entry := range rule.ManagedFields {
		if entry.Time != nil && entry.FieldsV1 != nil && strings.Contains(entry.FieldsV1.GetRawString(), field) && entry.Time.After(at) {
			at = entry.Time.Time
		}
	}
	if !at.IsZero() {
		return at, true
	}
	if at, err := time.Parse(time.RFC3339, value); err == nil {
		return at, true
	}
	return rule.CreationTimestamp.Time, true
}
