package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/apis/config"
)

func TestValidateDRAScopeArgs(t *testing.T) {
	allGates := feature.Features{
		EnableDRASchedulerFilterTimeout:    true,
		EnableDRADeviceBindingConditions:   true,
		EnableDRAResourceClaimDeviceStatus: true,
	}
	path := field.NewPath("pluginConfig").Key("DRAScope").Child("args")
	tests := map[string]struct {
		args             config.DRAScopeArgs
		keepZeroInterval bool
		keepZeroWrites   bool
		keepZeroHealth   bool
		fts              feature.Features
		wantErrs         []string
	}{
		"zero minPublishInterval": {
			args:             config.DRAScopeArgs{},
			keepZeroInterval: true,
			fts:              allGates,
			wantErrs:         []string{`pluginConfig[DRAScope].args.poolStatus.minPublishInterval: Invalid value: "0s": must be positive`},
		},
		"negative minPublishInterval": {
			args:     config.DRAScopeArgs{PoolStatus: config.PoolStatusArgs{MinPublishInterval: metav1.Duration{Duration: -time.Second}}},
			fts:      allGates,
			wantErrs: []string{`pluginConfig[DRAScope].args.poolStatus.minPublishInterval: Invalid value: "-1s": must be positive`},
		},
		"zero maxWritesPerSecond and maxCreationsPerSecond": {
			args:           config.DRAScopeArgs{},
			keepZeroWrites: true,
			fts:            allGates,
			wantErrs: []string{
				`pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: Invalid value: 0: must be at least 1`,
				`pluginConfig[DRAScope].args.poolStatus.maxCreationsPerSecond: Invalid value: 0: must be at least 1`,
			},
		},
		"maxPublishDelay below twice minPublishInterval": {
			args:     config.DRAScopeArgs{PoolStatus: config.PoolStatusArgs{MinPublishInterval: metav1.Duration{Duration: 2 * time.Second}, MaxPublishDelay: metav1.Duration{Duration: 3 * time.Second}}},
			fts:      allGates,
			wantErrs: []string{`pluginConfig[DRAScope].args.poolStatus.maxPublishDelay: Invalid value: "3s": must be at least twice poolStatus.minPublishInterval (2s): a pool written at half of it must have been allowed to write`},
		},
		"valid": {
			args: config.DRAScopeArgs{
				FilterTimeout:  &metav1.Duration{Duration: 10 * time.Second},
				BindingTimeout: &metav1.Duration{Duration: time.Minute},
			},
			fts: allGates,
		},
		"negative filterTimeout": {
			args: config.DRAScopeArgs{FilterTimeout: &metav1.Duration{Duration: -time.Second}},
			fts:  allGates,
			wantErrs: []string{
				`pluginConfig[DRAScope].args.filterTimeout: Invalid value: "-1s": must be zero or positive`,
			},
		},
		"bindingTimeout below one second, and negative filterTimeout": {
			args: config.DRAScopeArgs{
				FilterTimeout:  &metav1.Duration{Duration: -time.Second},
				BindingTimeout: &metav1.Duration{Duration: 500 * time.Millisecond},
			},
			fts: allGates,
			wantErrs: []string{
				`pluginConfig[DRAScope].args.filterTimeout: Invalid value: "-1s": must be zero or positive`,
				`pluginConfig[DRAScope].args.bindingTimeout: Invalid value: "500ms": must be at least 1 second`,
			},
		},
		"unknown deviceHealth.policy": {
			args:     config.DRAScopeArgs{DeviceHealth: config.DeviceHealthArgs{Policy: "Evict"}},
			fts:      allGates,
			wantErrs: []string{`pluginConfig[DRAScope].args.deviceHealth.policy: Unsupported value: "Evict": supported values: "Taint", "Avoid", "Ignore"`},
		},
		"zero deviceHealth.unhealthyHoldTime": {
			args:           config.DRAScopeArgs{DeviceHealth: config.DeviceHealthArgs{Policy: config.DeviceHealthIgnore}},
			keepZeroHealth: true,
			fts:            allGates,
			wantErrs:       []string{`pluginConfig[DRAScope].args.deviceHealth.unhealthyHoldTime: Invalid value: "0s": must be positive`},
		},
		"negative deviceHealth.unhealthyHoldTime": {
			args:     config.DRAScopeArgs{DeviceHealth: config.DeviceHealthArgs{UnhealthyHoldTime: metav1.Duration{Duration: -time.Minute}}},
			fts:      allGates,
			wantErrs: []string{`pluginConfig[DRAScope].args.deviceHealth.unhealthyHoldTime: Invalid value: "-1m0s": must be positive`},
		},
		"unknown deviceChoice": {
			args:     config.DRAScopeArgs{DeviceChoice: "WorstFit"},
			fts:      allGates,
			wantErrs: []string{`pluginConfig[DRAScope].args.deviceChoice: Unsupported value: "WorstFit": supported values: "FirstFit", "BestFit"`},
		},
		"unknown scoring.strategy": {
			args:     config.DRAScopeArgs{Scoring: config.ScoringArgs{Strategy: "BinPack"}},
			fts:      allGates,
			wantErrs: []string{`pluginConfig[DRAScope].args.scoring.strategy: Unsupported value: "BinPack": supported values: "None", "MostAllocated", "LeastAllocated"`},
		},
		"filterTimeout with its gate off": {
			args: config.DRAScopeArgs{FilterTimeout: &metav1.Duration{Duration: time.Second}},
			fts:  feature.Features{},
			wantErrs: []string{
				`pluginConfig[DRAScope].args.filterTimeout: Forbidden: DRASchedulingFilterTimeout feature gate is disabled`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.args.PoolStatus.MinPublishInterval.Duration == 0 && !tc.keepZeroInterval {
				tc.args.PoolStatus.MinPublishInterval.Duration = time.Second
			}
			if tc.args.PoolStatus.MaxWritesPerSecond == 0 && !tc.keepZeroWrites {
				tc.args.PoolStatus.MaxWritesPerSecond = 5
			}
			if tc.args.PoolStatus.MaxCreationsPerSecond == 0 && !tc.keepZeroWrites {
				tc.args.PoolStatus.MaxCreationsPerSecond = 50
			}
			if tc.args.PoolStatus.MaxPublishDelay.Duration == 0 {
				tc.args.PoolStatus.MaxPublishDelay.Duration = 10 * time.Second
			}
			if tc.args.Scoring.Strategy == "" {
				tc.args.Scoring.Strategy = config.ScoringNone
			}
			if !tc.keepZeroHealth {
				if tc.args.DeviceHealth.Policy == "" {
					tc.args.DeviceHealth.Policy = config.DeviceHealthAvoid
				}
				if tc.args.DeviceHealth.UnhealthyHoldTime.Duration == 0 {
					tc.args.DeviceHealth.UnhealthyHoldTime.Duration = 10 * time.Minute
				}
			}
			errs := ValidateDRAScopeArgs(path, &tc.args, tc.fts)
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("want %d errors %q, got %d: %v", len(tc.wantErrs), tc.wantErrs, len(errs), errs)
			}
			for i, err := range errs {
				if err.Error() != tc.wantErrs[i] {
					t.Errorf("error %d:\nwant %s\ngot  %s", i, tc.wantErrs[i], err.Error())
				}
			}
		})
	}
}

func TestValidateSchedulerWideArgs(t *testing.T) {
	firstPath := field.NewPath("profiles").Key("a").Child("pluginConfig").Key("DRAScope").Child("args")
	path := field.NewPath("profiles").Key("b").Child("pluginConfig").Key("DRAScope").Child("args")
	first := config.DRAScopeArgs{
		AdminAccess:  config.AdminAccessArgs{RequireNamespaceLabel: true},
		PoolStatus:   config.PoolStatusArgs{PublishResourcePools: true, MinPublishInterval: metav1.Duration{Duration: time.Second}, MaxWritesPerSecond: 5, MaxCreationsPerSecond: 50, MaxPublishDelay: metav1.Duration{Duration: 10 * time.Second}},
		DeviceHealth: config.DeviceHealthArgs{Policy: config.DeviceHealthAvoid, UnhealthyHoldTime: metav1.Duration{Duration: 10 * time.Minute}},
		Scoring:      config.ScoringArgs{Strategy: config.ScoringNone},
	}
	tests := map[string]struct {
		change   func(*config.DRAScopeArgs)
		wantErrs []string
	}{
		"same": {change: func(*config.DRAScopeArgs) {}},
		"per-profile args may differ": {change: func(a *config.DRAScopeArgs) {
			a.AdminAccess.RequireNamespaceLabel = false
			a.FilterTimeout = &metav1.Duration{Duration: time.Second}
			a.BindingTimeout = &metav1.Duration{Duration: time.Minute}
		}},
		"publishResourcePools": {
			change:   func(a *config.DRAScopeArgs) { a.PoolStatus.PublishResourcePools = false },
			wantErrs: []string{`profiles[b].pluginConfig[DRAScope].args.poolStatus.publishResourcePools: Invalid value: false: differs from profiles[a].pluginConfig[DRAScope].args.poolStatus.publishResourcePools: true; this arg is scheduler-wide`},
		},
		"minPublishInterval and maxWritesPerSecond": {
			change: func(a *config.DRAScopeArgs) {
				a.PoolStatus.MinPublishInterval.Duration = 2 * time.Second
				a.PoolStatus.MaxWritesPerSecond = 10
				a.PoolStatus.MaxCreationsPerSecond = 100
			},
			wantErrs: []string{
				`profiles[b].pluginConfig[DRAScope].args.poolStatus.minPublishInterval: Invalid value: "2s": differs from profiles[a].pluginConfig[DRAScope].args.poolStatus.minPublishInterval: 1s;`,
				`profiles[b].pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: Invalid value: 10: differs from profiles[a].pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: 5;`,
				`profiles[b].pluginConfig[DRAScope].args.poolStatus.maxCreationsPerSecond: Invalid value: 100: differs from profiles[a].pluginConfig[DRAScope].args.poolStatus.maxCreationsPerSecond: 50;`,
			},
		},
		"deviceHealth": {
			change: func(a *config.DRAScopeArgs) {
				a.DeviceHealth.Policy = config.DeviceHealthIgnore
				a.DeviceHealth.UnhealthyHoldTime.Duration = time.Minute
			},
			wantErrs: []string{
				`profiles[b].pluginConfig[DRAScope].args.deviceHealth.policy: Invalid value: "Ignore": differs from profiles[a].pluginConfig[DRAScope].args.deviceHealth.policy: Avoid;`,
				`profiles[b].pluginConfig[DRAScope].args.deviceHealth.unhealthyHoldTime: Invalid value: "1m0s": differs from profiles[a].pluginConfig[DRAScope].args.deviceHealth.unhealthyHoldTime: 10m0s;`,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := first
			tc.change(&args)
			errs := ValidateSchedulerWideArgs(firstPath, &first, path, &args)
			if len(errs) != len(tc.wantErrs) {
				t.Fatalf("got %d errors, want %d: %v", len(errs), len(tc.wantErrs), errs)
			}
			for i, want := range tc.wantErrs {
				if got := errs[i].Error(); !strings.HasPrefix(got, want) {
					t.Errorf("error %d = %q, want it to start with %q", i, got, want)
				}
			}
		})
	}
}
