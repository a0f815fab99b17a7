package kubectldra

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	"github.com/drascope/drascope/pkg/health"
	"github.com/drascope/drascope/pkg/poolstatus"
)

// What the commands say, on standard error, about where the pools came from
// and what RBAC hid. Missing permission is never an error: a user sees what
// they may see and a line saying what is hidden.
const (
	noteComputed          = "(%s: computed from ResourceSlices and ResourceClaims)"
	whyNoObjects          = "no ResourcePool objects found"
	whyObjectsForbidden   = "listing ResourcePools is not permitted"
	whyNotServed          = "the ResourcePool CRD is not installed"
	noteSlicesHidden      = "(listing ResourceSlices is not permitted: no pools can be shown)"
	noteClaimsHidden      = "(listing ResourceClaims is not permitted: allocations are not counted)"
	noteDetailNoSlices    = "(listing ResourceSlices is not permitted: device detail hidden)"
	noteDetailNoClaims    = "(listing ResourceClaims is not permitted: device detail hidden)"
	noteClaimsInNamespace = "(listing ResourceClaims is permitted in namespace %s only: devices held by other claims are shown without them)"
	noteClaimsInSome      = "(listing ResourceClaims is permitted in namespaces %s only: devices held by other claims are shown without them)"
)

// poolFilter selects pools; empty fields select everything.
type poolFilter struct{ driver, pool, node string }

func (f poolFilter) matches(driver, pool, node string) bool {
	return (f.driver == "" || f.driver == driver) && (f.pool == "" || f.pool == pool) && (f.node == "" || f.node == node)
}

// poolSource is the one place the commands get pools from: the scheduler's
// ResourcePool objects, or, when there are none the user may read, pools
// computed client side with pkg/drausage from the slices and claims the user
// may read. Device detail is always computed client side (the objects name
// no claim). The cluster's slices, claims and taint rules are read once per
// command, however many pools it shows.
type poolSource struct {
	pools  versioned.Interface
	client kubernetes.Interface
	// namespace is the kubeconfig's (or -n) namespace: a user who may not
	// list every claim still sees the claims of that one.
	namespace string
	now       time.Time
	view      *clusterView
	// listComputed: the last List computed its pools, not read them.
	listComputed bool
}

// clusterView is what the user may read of the cluster's DRA objects.
type clusterView struct {
	slices []*resourceapi.ResourceSlice
	// slicesHidden: listing ResourceSlices is not permitted.
	slicesHidden bool
	claims       []*resourceapi.ResourceClaim
	// claimsNamespaces is nil when claims holds every claim, else the
	// namespaces whose claims the user may list; claimsHidden when none.
	claimsNamespaces []string
	claimsHidden     bool
	taintRules       []*resourceapi.DeviceTaintRule
	// taintRulesHidden: listing DeviceTaintRules is not permitted.
	taintRulesHidden bool
}

// List returns the pools filter selects, sorted by name, and notes on where
// they came from.
func (s *poolSource) List(ctx context.Context, filter poolFilter) ([]v1alpha1.ResourcePool, []string, error) {
	var selectors []fields.Selector
	for field, value := range map[string]string{"spec.driver": filter.driver, "spec.poolName": filter.pool, "spec.nodeName": filter.node} {
		if value != "" {
			selectors = append(selectors, fields.OneTermEqualSelector(field, value))
		}
	}
	list, err := s.pools.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(selectors...).String()})
	var pools []v1alpha1.ResourcePool
	if err == nil {
		// The server filters on the selectable fields; filtering again
		// costs nothing and keeps the result right whatever answered.
		for _, rp := range list.Items {
			if filter.matches(rp.Spec.Driver, rp.Spec.PoolName, rp.Spec.NodeName) {
				pools = append(pools, rp)
			}
		}
	}
	why, err := whyCompute(err, err == nil && len(pools) == 0)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	s.listComputed = why != ""
	if why != "" {
		if pools, notes, err = s.computed(ctx, filter, why); err != nil {
			return nil, nil, err
		}
	} else {
		stale, err := s.staleNote(ctx, pools)
		if err != nil {
			return nil, nil, err
		}
		if stale != "" {
			notes = append(notes, stale)
		}
	}
	orphaned, err := s.orphanedRulesNote(ctx, pools)
	if err != nil {
		return nil, nil, err
	}
	if orphaned != "" {
		notes = append(notes, orphaned)
	}
	slices.SortFunc(pools, func(a, b v1alpha1.ResourcePool) int { return cmp.Compare(a.Name, b.Name) })
	return pools, notes, nil
}

// Refresh forgets what was read of the cluster, so that the next List
// reads it again.
func (s *poolSource) Refresh() { s.view = nil }

// Watch calls changed whenever a ResourcePool changes and, when the pools
// are computed, a ResourceSlice or ResourceClaim, until ctx ends, through a
// watch on each that the user may watch (claims of every namespace, else of
// the kubeconfig's). A watch that ends is started again after a second; the
// first events of each, one per existing object, call changed too, which
// only makes the caller look once more.
func (s *poolSource) Watch(ctx context.Context, computed bool, changed func()) {
	watches := []func(context.Context) (watch.Interface, error){
		func(ctx context.Context) (watch.Interface, error) {
			return s.pools.DrascopeV1alpha1().ResourcePools().Watch(ctx, metav1.ListOptions{})
		},
	}
	if computed {
		watches = append(watches, func(ctx context.Context) (watch.Interface, error) {
			return s.client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{})
		}, func(ctx context.Context) (watch.Interface, error) {
			w, err := s.client.ResourceV1().ResourceClaims("").Watch(ctx, metav1.ListOptions{})
			if apierrors.IsForbidden(err) && s.namespace != "" {
				return s.client.ResourceV1().ResourceClaims(s.namespace).Watch(ctx, metav1.ListOptions{})
			}
			return w, err
		})
	}
	for _, start := range watches {
		go func() {
			for ctx.Err() == nil {
				w, err := start(ctx)
				if apierrors.IsForbidden(err) || v1alpha1.IsNotServed(err) {
					return // not this user's to watch, or no such resource
				}
				if err == nil {
					for range w.ResultChan() {
						changed()
					}
					w.Stop()
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
}

// Get returns one pool: by object name, or (name empty) by driver and pool.
// The notes come with a not-found error too: what RBAC hid may be why.
func (s *poolSource) Get(ctx context.Context, name string, id drausage.PoolID) (*v1alpha1.ResourcePool, []string, error) {
	var why string
	if name != "" {
		rp, err := s.pools.DrascopeV1alpha1().ResourcePools().Get(ctx, name, metav1.GetOptions{})
		if why, err = whyCompute(err, apierrors.IsNotFound(err)); err != nil {
			return nil, nil, err
		}
		if why == "" {
			return rp, nil, nil
		}
	} else {
		pools, notes, err := s.List(ctx, poolFilter{driver: id.Driver, pool: id.Pool})
		if err != nil {
			return nil, nil, err
		}
		if len(pools) == 0 {
			// List computed them already: the pool is not there.
			return nil, notes, poolNotFound(name, id)
		}
		// A second object for one pool (made by hand) is one the
		// publisher deletes; it keeps the oldest.
		oldest := &pools[0]
		for i := range pools {
			if pools[i].CreationTimestamp.Before(&oldest.CreationTimestamp) {
				oldest = &pools[i]
			}
		}
		return oldest, notes, nil
	}
	computed, notes, err := s.computed(ctx, poolFilter{driver: id.Driver, pool: id.Pool}, why)
	if err != nil {
		return nil, nil, err
	}
	for i := range computed {
		if rp := &computed[i]; rp.Name == name {
			return rp, notes, nil
		}
	}
	return nil, notes, poolNotFound(name, id)
}

func poolNotFound(name string, id drausage.PoolID) error {
	if name != "" {
		return fmt.Errorf("pool %q not found: no ResourcePool and no ResourceSlices of that name (list them with kubectl dra pools)", name)
	}
	return fmt.Errorf("pool %q of driver %q not found (list pools with kubectl dra pools --driver %s)", id.Pool, id.Driver, id.Driver)
}

// whyCompute says why pools must be computed client side after reading
// ResourcePools gave err (or nothing, when empty), or "" when the objects
// serve. Errors other than missing permission or a missing CRD are errors.
func whyCompute(err error, empty bool) (string, error) {
	switch {
	case apierrors.IsForbidden(err):
		return whyObjectsForbidden, nil
	case err == nil && empty, apierrors.IsNotFound(err) && empty:
		return whyNoObjects, nil
	case v1alpha1.IsNotServed(err):
		return whyNotServed, nil
	case err != nil:
		return "", fmt.Errorf("reading ResourcePools: %w", err)
	}
	return "", nil
}

// computed counts the pools filter selects from what the user may read.
// Allocations are counted only when every claim may be listed: the claims of
// one namespace would undercount.
func (s *poolSource) computed(ctx context.Context, filter poolFilter, why string) ([]v1alpha1.ResourcePool, []string, error) {
	view, err := s.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	notes := []string{fmt.Sprintf(noteComputed, why)}
	if view.slicesHidden {
		return nil, append(notes, noteSlicesHidden), nil
	}
	var claims []*resourceapi.ResourceClaim
	if view.claimsNamespaces == nil && !view.claimsHidden {
		claims = view.claims
	} else {
		notes = append(notes, noteClaimsHidden)
	}
	var selected []*resourceapi.ResourceSlice
	for _, slice := range view.slices {
		if filter.driver == "" || slice.Spec.Driver == filter.driver {
			selected = append(selected, slice)
		}
	}
	var pools []v1alpha1.ResourcePool
	for _, usage := range drausage.ComputePoolUsage(selected, claims, drausage.Options{DeviceTaintRules: view.taintRules}) {
		if !filter.matches(usage.Driver, usage.Pool, usage.NodeName) {
			continue
		}
		name, ok := v1alpha1.PlainName(usage.Driver, usage.Pool)
		if !ok {
			name = v1alpha1.HashedName(usage.Driver, usage.Pool)
		}
		pools = append(pools, v1alpha1.ResourcePool{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ResourcePool"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.ResourcePoolSpec{Driver: usage.Driver, PoolName: usage.Pool, NodeName: usage.NodeName},
			Status:     *poolstatus.For(&usage, "", nil, s.now),
		})
	}
	return pools, notes, nil
}

// Detail computes a pool's devices, with the claims that hold them, from
// what the user may read, or returns nil and the note saying why there is
// none. A user who may list the claims of one namespace only sees those
// named; the devices other claims hold are taken from the ResourcePool,
// which says which devices are held but not by whom. Health is what the
// scheduler published: it learned it from pods a client cannot see.
func (s *poolSource) Detail(ctx context.Context, rp *v1alpha1.ResourcePool) (*drausage.PoolUsage, string, error) {
	view, err := s.load(ctx)
	if err != nil {
		return nil, "", err
	}
	switch {
	case view.slicesHidden:
		return nil, noteDetailNoSlices, nil
	case view.claimsHidden:
		return nil, noteDetailNoClaims, nil
	}
	id := drausage.PoolID{Driver: rp.Spec.Driver, Pool: rp.Spec.PoolName}
	opts := drausage.Options{DeviceTaintRules: view.taintRules, HealthTaintKey: health.TaintKey}
	opts.Health, opts.WithholdUnhealthy = schedulerHealth(rp)
	usage := drausage.ComputePool(id, view.poolSlices(id), view.claims, opts)
	if view.claimsNamespaces == nil {
		return &usage, "", nil
	}
	markHeldByOthers(&usage, rp)
	return &usage, view.claimsNote(), nil
}

// load reads the cluster's slices, claims and taint rules, once.
func (s *poolSource) load(ctx context.Context) (*clusterView, error) {
	if s.view != nil {
		return s.view, nil
	}
	view := &clusterView{}
	sliceList, err := s.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		view.slicesHidden = true
	case err != nil:
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	default:
		for i := range sliceList.Items {
			view.slices = append(view.slices, &sliceList.Items[i])
		}
	}
	claimList, err := s.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		if err := s.loadPermittedClaims(ctx, view); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	default:
		for i := range claimList.Items {
			view.claims = append(view.claims, &claimList.Items[i])
		}
	}
	rules, err := s.client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		// Devices count as their slices say.
		view.taintRulesHidden = true
	case apierrors.IsNotFound(err):
		// Not served: devices count as their slices say.
	case err != nil:
		return nil, fmt.Errorf("listing DeviceTaintRules: %w", err)
	default:
		for i := range rules.Items {
			view.taintRules = append(view.taintRules, &rules.Items[i])
		}
	}
	s.view = view
	return view, nil
}

// maxClaimNamespaces bounds the namespaces tried one by one for a user who
// may not list every claim.
const maxClaimNamespaces = 100

// loadPermittedClaims reads the claims of every namespace whose claims the
// user may list, for a user who may not list them all: the namespaces the
// user may list (at most maxClaimNamespaces), and the kubeconfig's. A
// namespace that refuses is left out; none left, claims are hidden.
func (s *poolSource) loadPermittedClaims(ctx context.Context, view *clusterView) error {
	candidates := sets.New[string]()
	if s.namespace != "" {
		candidates.Insert(s.namespace)
	}
	if list, err := s.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: maxClaimNamespaces}); err == nil {
		for _, ns := range list.Items {
			candidates.Insert(ns.Name)
		}
	}
	for _, namespace := range sets.List(candidates) {
		list, err := s.client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsForbidden(err):
			continue
		case err != nil:
			return fmt.Errorf("listing ResourceClaims in namespace %s: %w", namespace, err)
		}
		view.claimsNamespaces = append(view.claimsNamespaces, namespace)
		for i := range list.Items {
			view.claims = append(view.claims, &list.Items[i])
		}
	}
	view.claimsHidden = len(view.claimsNamespaces) == 0
	if view.claimsHidden {
		view.claimsNamespaces = nil
	}
	return nil
}

// claimsNote says which namespaces' claims the user may list.
func (v *clusterView) claimsNote() string {
	if len(v.claimsNamespaces) == 1 {
		return fmt.Sprintf(noteClaimsInNamespace, v.claimsNamespaces[0])
	}
	return fmt.Sprintf(noteClaimsInSome, strings.Join(v.claimsNamespaces, ", "))
}

// poolSlices are the slices of one pool.
func (v *clusterView) poolSlices(id drausage.PoolID) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, slice := range v.slices {
		if slice.Spec.Driver == id.Driver && slice.Spec.Pool.Name == id.Pool {
			out = append(out, slice)
		}
	}
	return out
}

// schedulerHealth returns device health as the scheduler remembers it, from
// the ResourcePool: it learned it from pod statuses, some of them of pods
// long deleted, which a client cannot see. It also says whether the
// scheduler withholds Unhealthy devices, as the ResourcePool publishes its
// deviceHealth.policy.
func schedulerHealth(rp *v1alpha1.ResourcePool) (func(drausage.PoolID, string) drausage.DeviceHealth, bool) {
	withholds := config.DeviceHealthPolicy(rp.Status.DeviceHealthPolicy).Withholds()
	known := map[string]drausage.DeviceHealth{}
	for _, d := range rp.Status.Devices {
		if d.Health != "" {
			known[d.Name] = drausage.DeviceHealth{Status: v1.ResourceHealthStatus(d.Health), Detail: d.HealthMessage}
		}
	}
	if len(known) == 0 {
		return nil, withholds
	}
	return func(_ drausage.PoolID, device string) drausage.DeviceHealth { return known[device] }, withholds
}

// markHeldByOthers takes, from the ResourcePool, the state of devices that
// claims the user may not list hold. How physical devices are split is
// left out: it needs the allocations of every claim, and the ResourcePool
// does not say what a held partition consumes.
func markHeldByOthers(usage *drausage.PoolUsage, rp *v1alpha1.ResourcePool) {
	usage.PhysicalDevices, usage.WholeDevicesFree = nil, 0
	held := map[string]string{}
	for _, d := range rp.Status.Devices {
		if d.State == string(drausage.DeviceAllocated) || d.State == string(drausage.DevicePartiallyAllocated) {
			held[d.Name] = d.State
		}
	}
	for i := range usage.Devices {
		d := &usage.Devices[i]
		state, ok := held[d.Name]
		if !ok || len(d.Allocations) > 0 {
			continue
		}
		// Held, but by no claim the user may list: no allocation to show.
		d.State, d.Reason, d.Message = drausage.DeviceState(state), "", ""
	}
}
