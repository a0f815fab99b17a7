package draruntime

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/drascope/drascope/apis/config"
)

// An unset deviceHealth.policy is Taint only where DeviceTaintRules can be
// written: the gate is on (it is, in this 1.37 test binary) and the
// apiserver serves them. (The gate-off path runs on a real apiserver in
// TestSchedulerBinaryAdminAccessGateOff.)
func TestUnsetPolicyFollowsWhatTheAPIServerServes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for name, tc := range map[string]struct {
		served []metav1.APIResourceList
		want   config.DeviceHealthPolicy
	}{
		"served": {served: []metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}, {Name: "devicetaintrules"}}}}, want: config.DeviceHealthTaint},
		"resource.k8s.io/v1 without devicetaintrules": {served: []metav1.APIResourceList{{GroupVersion: "resource.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "resourceslices"}}}}, want: config.DeviceHealthAvoid},
		"no resource.k8s.io/v1":                       {want: config.DeviceHealthAvoid},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			client.Discovery().(*fakediscovery.FakeDiscovery).Resources = ptrs(tc.served)
			args := &config.DRAScopeArgs{}
			got := withResolvedDefaults(ctx, "drascope-scheduler", args, checkTaintRules(ctx, client))
			if got.DeviceHealth.Policy != tc.want {
				t.Errorf("policy %q, want %q", got.DeviceHealth.Policy, tc.want)
			}
			if args.DeviceHealth.Policy != "" {
				t.Error("the profile's own args were changed")
			}
			explicit := &config.DRAScopeArgs{DeviceHealth: config.DeviceHealthArgs{Policy: config.DeviceHealthTaint}}
			if got := withResolvedDefaults(ctx, "drascope-scheduler", explicit, checkTaintRules(ctx, client)); got.DeviceHealth.Policy != config.DeviceHealthTaint {
				t.Errorf("an explicit Taint became %q", got.DeviceHealth.Policy)
			}
		})
	}
}

func ptrs(lists []metav1.APIResourceList) []*metav1.APIResourceList {
	out := make([]*metav1.APIResourceList, len(lists))
	for i := range lists {
		out[i] = &lists[i]
	}
	return out
}

// Past maxSchedulerSeries names, this process's and default-scheduler keep
// their series, then the busiest; the rest are summed, the same way on
// every scrape.
func TestPodsWithClaimsSeriesAreCapped(t *testing.T) {
	counts := map[string]int{"drascope-scheduler": 0, "default-scheduler": 1}
	for i := range 30 {
		counts[fmt.Sprintf("team-%02d", i)] = i + 1
	}
	kept := func(name string) bool { return name == "drascope-scheduler" || name == "default-scheduler" }
	got := capSeries(counts, kept)
	if len(got) != maxSchedulerSeries {
		t.Fatalf("%d series, want %d", len(got), maxSchedulerSeries)
	}
	for _, name := range []string{"drascope-scheduler", "default-scheduler", "team-29", "team-17"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no series for %s: %v", name, got)
		}
	}
	if _, ok := got["team-16"]; ok {
		t.Errorf("team-16 kept over busier schedulers: %v", got)
	}
	total, want := 0, 0
	for _, n := range got {
		total += n
	}
	for _, n := range counts {
		want += n
	}
	if total != want {
		t.Errorf("series sum to %d, want every pod counted once, %d", total, want)
	}
}
