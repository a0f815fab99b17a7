package drascope

import (
	"strings"
	"testing"

	"github.com/drascope/drascope/pkg/adminaccess"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// claimsByName answers Get like the scheduler's claim tracker; the other
// methods are never called by the admin-access guard.
type claimsByName struct {
	fwk.ResourceClaimTracker
	claims map[string]*resourceapi.ResourceClaim
}

func (c claimsByName) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	if claim, ok := c.claims[namespace+"/"+name]; ok {
		return claim, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

func namespaceLister(t *testing.T, namespaces ...*v1.Namespace) corelisters.NamespaceLister {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range namespaces {
		if err := indexer.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNamespaceLister(indexer)
}

func namespace(name string, labels map[string]string) *v1.Namespace {
	return &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

var adminLabel = map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "true"}

func claim(name string, adminAccess *bool, allocated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "plain", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}},
			{Name: "observe", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AdminAccess: adminAccess}},
		}}},
	}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	return c
}

func podWithClaims(names ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "monitor"}}
	for i := range names {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "c", ResourceClaimName: &names[i]})
	}
	return pod
}

func TestCheckAdminAccess(t *testing.T) {
	claims := claimsByName{claims: map[string]*resourceapi.ResourceClaim{
		"team/admin":           claim("admin", ptr.To(true), false),
		"team/admin-allocated": claim("admin-allocated", ptr.To(true), true),
		"team/plain":           claim("plain", nil, false),
		"team/admin-false":     claim("admin-false", ptr.To(false), false),
	}}
	tests := map[string]struct {
		gateOn       bool
		requireLabel bool
		namespaces   []*v1.Namespace
		pod          *v1.Pod
		wantCode     fwk.Code
		wantMessage  []string
	}{
		"labelled namespace": {
			gateOn: true, requireLabel: true,
			namespaces: []*v1.Namespace{namespace("team", adminLabel)},
			pod:        podWithClaims("admin"),
			wantCode:   fwk.Success,
		},
		"label missing": {
			gateOn: true, requireLabel: true,
			namespaces:  []*v1.Namespace{namespace("team", nil)},
			pod:         podWithClaims("plain", "admin"),
			wantCode:    fwk.UnschedulableAndUnresolvable,
			wantMessage: []string{"claim team/admin, request observe", `resource.kubernetes.io/admin-access="true" on namespace team`, "kubectl label namespace team resource.kubernetes.io/admin-access=true"},
		},
		"label with another value": {
			gateOn: true, requireLabel: true,
			namespaces:  []*v1.Namespace{namespace("team", map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "yes"})},
			pod:         podWithClaims("admin"),
			wantCode:    fwk.UnschedulableAndUnresolvable,
			wantMessage: []string{"on namespace team"},
		},
		"namespace not in the cache yet": {
			gateOn: true, requireLabel: true,
			pod:         podWithClaims("admin"),
			wantCode:    fwk.UnschedulableAndUnresolvable,
			wantMessage: []string{"namespace team, which the scheduler has not seen yet"},
		},
		"label missing but not required": {
			gateOn: true, requireLabel: false,
			namespaces: []*v1.Namespace{namespace("team", nil)},
			pod:        podWithClaims("admin"),
			wantCode:   fwk.Success,
		},
		"already allocated claims are left alone": {
			gateOn: true, requireLabel: true,
			namespaces: []*v1.Namespace{namespace("team", nil)},
			pod:        podWithClaims("admin-allocated"),
			wantCode:   fwk.Success,
		},
		"no admin access requested": {
			gateOn: true, requireLabel: true,
			namespaces: []*v1.Namespace{namespace("team", nil)},
			pod:        podWithClaims("plain", "admin-false"),
			wantCode:   fwk.Success,
		},
		"claim not created yet": {
			gateOn: true, requireLabel: true,
			namespaces: []*v1.Namespace{namespace("team", nil)},
			pod:        podWithClaims("missing"),
			wantCode:   fwk.Success,
		},
		"gate off": {
			gateOn: false, requireLabel: true,
			namespaces:  []*v1.Namespace{namespace("team", adminLabel)},
			pod:         podWithClaims("admin"),
			wantCode:    fwk.UnschedulableAndUnresolvable,
			wantMessage: []string{"claim team/admin, request observe: admin access is requested, but the DRAAdminAccess feature gate is disabled"},
		},
		"gate off, nothing asks for admin access": {
			gateOn: false, requireLabel: false,
			pod:      podWithClaims("plain"),
			wantCode: fwk.Success,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pl := &DRAScope{
				enabled:     true,
				adminAccess: adminaccess.Guard{Enabled: tc.gateOn, RequireNamespaceLabel: tc.requireLabel, Namespaces: namespaceLister(t, tc.namespaces...)},
				claims:      claims,
			}
			status := pl.checkAdminAccess(ctx, tc.pod, pl.claimsOf(tc.pod))
			if status.Code() != tc.wantCode {
				t.Fatalf("code %v, want %v (message %q)", status.Code(), tc.wantCode, status.Message())
			}
			for _, want := range tc.wantMessage {
				if !strings.Contains(status.Message(), want) {
					t.Errorf("message %q does not contain %q", status.Message(), want)
				}
			}
		})
	}
}

// recordingActivator records which pods the plugin asked to retry.
type recordingActivator struct{ activated sets.Set[string] }

func (r *recordingActivator) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	for key := range pods {
		r.activated.Insert(key)
	}
}

func TestRetryWhenNamespaceLabelled(t *testing.T) {
	pod := func(name, scheduler, node string, claims int) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
		p.Spec.SchedulerName, p.Spec.NodeName = scheduler, node
		for range claims {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: "gpu"})
		}
		return p
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range []*v1.Pod{
		pod("waiting", "drascope-scheduler", "", 1),
		pod("bound", "drascope-scheduler", "node-1", 1),
		pod("other-profile", "default-scheduler", "", 1),
		pod("no-claims", "drascope-scheduler", "", 0),
	} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		old, new interface{}
		want     []string
	}{
		"label added":            {old: namespace("team", nil), new: namespace("team", adminLabel), want: []string{"team/waiting"}},
		"created with the label": {old: nil, new: namespace("team", adminLabel), want: []string{"team/waiting"}},
		"label already there":    {old: namespace("team", adminLabel), new: namespace("team", adminLabel)},
		"label removed":          {old: namespace("team", adminLabel), new: namespace("team", nil)},
		"label with another value": {
			old: namespace("team", nil),
			new: namespace("team", map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "yes"}),
		},
		"another namespace": {old: namespace("other", nil), new: namespace("other", adminLabel)},
		"not a namespace":   {old: nil, new: "garbage"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			activator := &recordingActivator{activated: sets.New[string]()}
			pl := &DRAScope{pods: corelisters.NewPodLister(indexer), activator: activator, profileName: "drascope-scheduler"}
			pl.retryWhenNamespaceLabelled(logger, tc.old, tc.new)
			if diff := cmp.Diff(sets.New(tc.want...), activator.activated); diff != "" {
				t.Errorf("activated pods (-want +got):\n%s", diff)
			}
		})
	}
}
