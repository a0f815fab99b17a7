package health

import (
	"context"
	"maps"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/pkg/informerevents"
)

// TaintWriter makes the DeviceTaintRules drascope owns match the cache:
// one NoSchedule rule per Unhealthy device, none for any other; with
// persist false (a policy other than Taint), none at all, so that switching
// the policy away from Taint removes what it left. Only the process leading
// scheduling runs it; every process enqueues, so that a new leader starts
// from a full queue and then resyncs anyway.
//
// It never touches a rule without drascope's label (HasOwnLabel): a rule of
// the name it would use is left alone and logged once. A labelled rule that
// is not exactly one it writes (edited to select another device, or to
// carry another key) is deleted. Failed writes are retried with exponential
// backoff, per rule.
type TaintWriter struct {
	cache   *Cache
	client  kubernetes.Interface
	rules   resourcelisters.DeviceTaintRuleLister
	persist bool
	queue   workqueue.TypedRateLimitingInterface[string]
	foreign onceSet
	// ObserveWrite is told about each API write, with its verb and error.
	ObserveWrite func(verb string, err error)

	mu sync.Mutex
	// devices are the devices whose rule names are queued.
	devices map[string]Device
}

// NewTaintWriter returns a writer for the rules in informer, which must be
// the DeviceTaintRule informer of the scheduler; it adds a handler so that
// a rule deleted or edited by hand is put back.
func NewTaintWriter(c *Cache, client kubernetes.Interface, informer cache.SharedIndexInformer, persist bool) (*TaintWriter, error) {
	w := &TaintWriter{
		cache:   c,
		client:  client,
		rules:   resourcelisters.NewDeviceTaintRuleLister(informer.GetIndexer()),
		persist: persist,
		devices: map[string]Device{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "drascope_device_taint_rules"}),
	}
	enqueueRule := func(obj interface{}) {
		rule, ok := informerevents.Object[*resourceapi.DeviceTaintRule](obj)
		if !ok || !HasOwnLabel(rule) {
			return
		}
		// Every replica's cache takes an operator's clear, so that a new
		// leader does not write the rule back.
		if at, cleared := ClearRequested(rule); cleared {
			if d, ok := DeviceOfRule(rule); ok {
				c.Clear(klog.Background(), d, at)
			}
		}
		w.enqueueRule(rule)
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueRule,
		UpdateFunc: func(_, obj interface{}) { enqueueRule(obj) },
		DeleteFunc: enqueueRule,
	})
	return w, err
}

// Enqueue asks for the rules of devices whose health changed.
func (w *TaintWriter) Enqueue(devices []Device) {
	for _, d := range devices {
		name := RuleName(d)
		w.mu.Lock()
		w.devices[name] = d
		w.mu.Unlock()
		w.queue.Add(name)
	}
}

func (w *TaintWriter) enqueueRule(rule *resourceapi.DeviceTaintRule) {
	if d, ok := DeviceOfRule(rule); ok {
		w.Enqueue([]Device{d})
		return
	}
	w.queue.Add(rule.Name)
}

// Run writes rules until ctx ends. It first enqueues every Unhealthy device
// and every rule with drascope's label, so that what changed while another
// process led, or while none did, is caught up.
func (w *TaintWriter) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	unhealthy := w.cache.Unhealthy()
	for _, r := range unhealthy {
		w.Enqueue([]Device{r.Device})
	}
	own, err := w.rules.List(labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedBy}))
	if err != nil {
		logger.Error(err, "Listing DeviceTaintRules")
	}
	for _, rule := range own {
		w.enqueueRule(rule)
	}
	if w.persist {
		logger.Info("Writing DeviceTaintRules for Unhealthy devices", "unhealthy", len(unhealthy), "existingRules", len(own))
	} else if len(own) > 0 {
		logger.Info("Deleting the DeviceTaintRules drascope wrote: deviceHealth.policy is no longer Taint", "existingRules", len(own))
	}
	for w.next(ctx) {
	}
}

func (w *TaintWriter) next(ctx context.Context) bool {
	name, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(name)
	if err := w.sync(ctx, name); err != nil {
		logger := klog.FromContext(ctx)
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			// The informer has not caught up with a write yet.
			logger.V(2).Info("DeviceTaintRule changed meanwhile, will look again", "rule", name, "err", err)
		} else {
			logger.Error(err, "Writing a DeviceTaintRule, will retry", "rule", name, "retries", w.queue.NumRequeues(name))
		}
		w.queue.AddRateLimited(name)
		return true
	}
	w.queue.Forget(name)
	return true
}

// sync makes one rule what the cache wants.
func (w *TaintWriter) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx)
	actual, err := w.rules.Get(name)
	if apierrors.IsNotFound(err) {
		actual, err = nil, nil
	}
	if err != nil {
		return err
	}
	if actual != nil && !HasOwnLabel(actual) {
		if w.foreign.first(name) {
			logger.Info("A DeviceTaintRule with the name drascope uses was not written by drascope; leaving it alone",
				"rule", name, "label", ManagedByLabel+"="+ManagedBy)
		}
		return nil
	}
	w.mu.Lock()
	d, known := w.devices[name]
	w.mu.Unlock()
	if actual != nil && !known {
		if selected, ok := deviceOfRule(actual); ok && RuleName(selected) == name {
			d, known = selected, true
		}
	}
	if actual != nil && (!known || !sameDevice(actual, d)) {
		// Labelled as drascope's, but its name is not that of the device
		// it selects: edited by hand, and the persisted report of nothing.
		// The device its name belongs to may still want a rule: look again.
		if err := w.delete(ctx, actual, "it carries drascope's label but does not select the device its name belongs to", !known); err != nil {
			return err
		}
		if known {
			w.queue.Add(name)
		}
		return nil
	}
	var desired *resourceapi.DeviceTaintRule
	if known && w.persist {
		desired = w.cache.desiredRule(d)
	}
	switch {
	case desired == nil && actual == nil:
		w.forget(name)
		return nil
	case desired == nil:
		reason := "the device is no longer Unhealthy"
		if !w.persist {
			reason = "deviceHealth.policy is not Taint"
		}
		return w.delete(ctx, actual, reason, true)
	case actual == nil:
		_, err := w.client.ResourceV1().DeviceTaintRules().Create(ctx, desired, metav1.CreateOptions{})
		w.observe("create", err)
		if err == nil {
			logger.V(2).Info("Created a DeviceTaintRule for an Unhealthy device", "rule", name, "device", d, "reporterUID", desired.Annotations[AnnotationReporter])
		}
		return err
	case sameRule(actual, desired):
		return nil
	default:
		update := actual.DeepCopy()
		update.Labels = maps.Clone(actual.Labels)
		maps.Copy(update.Labels, desired.Labels)
		update.Annotations = maps.Clone(actual.Annotations)
		if update.Annotations == nil {
			update.Annotations = map[string]string{}
		}
		for key := range update.Annotations {
			if _, ours := desired.Annotations[key]; !ours && isOwnAnnotation(key) {
				delete(update.Annotations, key)
			}
		}
		maps.Copy(update.Annotations, desired.Annotations)
		update.Spec.DeviceSelector = desired.Spec.DeviceSelector
		update.Spec.Taint.Key, update.Spec.Taint.Value, update.Spec.Taint.Effect = desired.Spec.Taint.Key, desired.Spec.Taint.Value, desired.Spec.Taint.Effect
		_, err := w.client.ResourceV1().DeviceTaintRules().Update(ctx, update, metav1.UpdateOptions{})
		w.observe("update", err)
		return err
	}
}

// delete deletes a rule drascope manages, exactly the version it saw, and
// with forget, forgets its name.
func (w *TaintWriter) delete(ctx context.Context, rule *resourceapi.DeviceTaintRule, reason string, forget bool) error {
	err := w.client.ResourceV1().DeviceTaintRules().Delete(ctx, rule.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &rule.UID, ResourceVersion: &rule.ResourceVersion},
	})
	w.observe("delete", err)
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Deleted a DeviceTaintRule", "rule", rule.Name, "reason", reason)
		if forget {
			w.forget(rule.Name)
		}
	}
	return err
}

// forget drops the device of a rule name that needs nothing more, so that
// the map stays as small as the set of rules.
func (w *TaintWriter) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.devices, name)
}

// sameDevice reports whether the rule selects exactly d.
func sameDevice(rule *resourceapi.DeviceTaintRule, d Device) bool {
	got, ok := deviceOfRule(rule)
	return ok && got == d
}

func (w *TaintWriter) observe(verb string, err error) {
	if w.ObserveWrite != nil {
		w.ObserveWrite(verb, err)
	}
}

// sameRule compares what drascope writes of a rule; the apiserver adds the
// taint's timeAdded, and others may add labels and annotations of their own.
func sameRule(actual, desired *resourceapi.DeviceTaintRule) bool {
	for key, value := range desired.Labels {
		if actual.Labels[key] != value {
			return false
		}
	}
	for key := range actual.Annotations {
		if _, ours := desired.Annotations[key]; !ours && isOwnAnnotation(key) {
			return false
		}
	}
	for key, value := range desired.Annotations {
		if actual.Annotations[key] != value {
			return false
		}
	}
	t, dt := actual.Spec.Taint, desired.Spec.Taint
	return apiequality.Semantic.DeepEqual(actual.Spec.DeviceSelector, desired.Spec.DeviceSelector) &&
		t.Key == dt.Key && t.Value == dt.Value && t.Effect == dt.Effect
}

func isOwnAnnotation(key string) bool {
	switch key {
	case AnnotationReportedBy, AnnotationReporter, AnnotationNode, AnnotationReportedAt, AnnotationMessage, AnnotationHeldUntil,
		// A clear that did not end the state the rule now persists (a
		// newer report) goes with the rule's next update.
		AnnotationClearRequested:
		return true
	}
	return false
}
