package drascope

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drascope/drascope/apis/config"
)

// A framework built without a DRAScope pluginConfig entry gets the same args
// as a KubeSchedulerConfiguration without one (apis/config/v1 tests those).
func TestDecodeArgsDefaultsNil(t *testing.T) {
	got, err := decodeArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &config.DRAScopeArgs{
		FilterTimeout:  &metav1.Duration{Duration: 10 * time.Second},
		BindingTimeout: &metav1.Duration{Duration: 600 * time.Second},
		AdminAccess:    config.AdminAccessArgs{RequireNamespaceLabel: true},
		PoolStatus:     config.PoolStatusArgs{PublishResourcePools: true, MinPublishInterval: metav1.Duration{Duration: time.Second}, MaxWritesPerSecond: 5, MaxCreationsPerSecond: 50, MaxPublishDelay: metav1.Duration{Duration: 10 * time.Second}},
		DeviceHealth:   config.DeviceHealthArgs{UnhealthyHoldTime: metav1.Duration{Duration: 10 * time.Minute}},
		Scoring:        config.ScoringArgs{Strategy: config.ScoringNone},
		DeviceChoice:   config.DeviceChoiceFirstFit,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	if _, err := decodeArgs(&metav1.Status{}); err == nil {
		t.Error("args of another type must be refused")
	}
}
