package v1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/drascope/drascope/apis/config"
	_ "github.com/drascope/drascope/apis/config/scheme"
)

// loadDRAScopeArgs loads a KubeSchedulerConfiguration the way the scheduler
// binary does and returns the DRAScope args of its only profile.
func loadDRAScopeArgs(t *testing.T, pluginConfig string) (*config.DRAScopeArgs, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.yaml")
	content := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: drascope-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: DRAScope
      disabled:
      - name: DynamicResources
` + pluginConfig
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, file)
	if err != nil {
		return nil, err
	}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == "DRAScope" {
			args, ok := pc.Args.(*config.DRAScopeArgs)
			if !ok {
				t.Fatalf("DRAScope args decoded as %T", pc.Args)
			}
			return args, nil
		}
	}
	t.Fatalf("no DRAScope pluginConfig after loading; got %d entries", len(cfg.Profiles[0].PluginConfig))
	return nil, nil
}

var (
	defaultPoolStatus   = config.PoolStatusArgs{PublishResourcePools: true, MinPublishInterval: metav1.Duration{Duration: time.Second}, MaxWritesPerSecond: 5, MaxCreationsPerSecond: 50, MaxPublishDelay: metav1.Duration{Duration: 10 * time.Second}}
	defaultDeviceHealth = config.DeviceHealthArgs{UnhealthyHoldTime: metav1.Duration{Duration: 10 * time.Minute}}
)

func TestLoadArgs(t *testing.T) {
	tests := map[string]struct {
		pluginConfig string
		want         *config.DRAScopeArgs
		wantErr      string
	}{
		"no pluginConfig gets defaults": {
			want: &config.DRAScopeArgs{
				FilterTimeout:  &metav1.Duration{Duration: 10 * time.Second},
				BindingTimeout: &metav1.Duration{Duration: 600 * time.Second},
				AdminAccess:    config.AdminAccessArgs{RequireNamespaceLabel: true},
				PoolStatus:     defaultPoolStatus,
				DeviceHealth:   defaultDeviceHealth,
				Scoring:        config.ScoringArgs{Strategy: config.ScoringNone},
				DeviceChoice:   config.DeviceChoiceFirstFit,
			},
		},
		"explicit values are kept": {
			pluginConfig: `  pluginConfig:
  - name: DRAScope
    args:
      filterTimeout: 3s
      bindingTimeout: 2m
      adminAccess:
        requireNamespaceLabel: false
      poolStatus:
        publishResourcePools: false
        minPublishInterval: 250ms
        maxWritesPerSecond: 20
        maxCreationsPerSecond: 200
        maxPublishDelay: 4s
      deviceHealth:
        policy: Ignore
        unhealthyHoldTime: 90s
      scoring:
        strategy: MostAllocated
      deviceChoice: BestFit
`,
			want: &config.DRAScopeArgs{
				FilterTimeout:  &metav1.Duration{Duration: 3 * time.Second},
				BindingTimeout: &metav1.Duration{Duration: 2 * time.Minute},
				AdminAccess:    config.AdminAccessArgs{RequireNamespaceLabel: false},
				PoolStatus:     config.PoolStatusArgs{PublishResourcePools: false, MinPublishInterval: metav1.Duration{Duration: 250 * time.Millisecond}, MaxWritesPerSecond: 20, MaxCreationsPerSecond: 200, MaxPublishDelay: metav1.Duration{Duration: 4 * time.Second}},
				DeviceHealth:   config.DeviceHealthArgs{Policy: config.DeviceHealthIgnore, UnhealthyHoldTime: metav1.Duration{Duration: 90 * time.Second}},
				Scoring:        config.ScoringArgs{Strategy: config.ScoringMostAllocated},
				DeviceChoice:   config.DeviceChoiceBestFit,
			},
		},
		"zero filterTimeout disables the limit and is kept": {
			pluginConfig: `  pluginConfig:
  - name: DRAScope
    args:
      filterTimeout: 0s
`,
			want: &config.DRAScopeArgs{
				FilterTimeout:  &metav1.Duration{},
				BindingTimeout: &metav1.Duration{Duration: 600 * time.Second},
				AdminAccess:    config.AdminAccessArgs{RequireNamespaceLabel: true},
				PoolStatus:     defaultPoolStatus,
				DeviceHealth:   defaultDeviceHealth,
				Scoring:        config.ScoringArgs{Strategy: config.ScoringNone},
				DeviceChoice:   config.DeviceChoiceFirstFit,
			},
		},
		"unknown top-level field": {
			pluginConfig: `  pluginConfig:
  - name: DRAScope
    args:
      filterTimeOut: 3s
`,
			wantErr: `unknown field "filterTimeOut"`,
		},
		"unknown nested field": {
			pluginConfig: `  pluginConfig:
  - name: DRAScope
    args:
      adminAccess:
        requireNamespaceLabels: true
`,
			wantErr: `unknown field "adminAccess.requireNamespaceLabels"`,
		},
		"unknown deviceHealth field": {
			pluginConfig: `  pluginConfig:
  - name: DRAScope
    args:
      deviceHealth:
        holdTime: 5m
`,
			wantErr: `unknown field "deviceHealth.holdTime"`,
		},
		"wrong type": {
			pluginConfig: `  pluginConfig:
  - name: DRAScope
    args:
      adminAccess:
        requireNamespaceLabel: "yes"
`,
			wantErr: "requireNamespaceLabel",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := loadDRAScopeArgs(t, tc.pluginConfig)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.TypeMeta = metav1.TypeMeta{}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

// The shipped configurations load, and every profile runs DRAScope instead
// of DynamicResources, before DRAScopePreemption instead of
// DefaultPreemption: one profile left on the in-tree plugin would not see
// the release holds of the others, and one on DefaultPreemption would not
// free devices for gangs.
func TestShippedConfigs(t *testing.T) {
	for file, profiles := range map[string][]string{
		"config.yaml":              {"drascope-scheduler"},
		"config-two-profiles.yaml": {"default-scheduler", "drascope-scheduler"},
	} {
		t.Run(file, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			cfg, err := options.LoadConfigFromFile(logger, filepath.Join("..", "..", "..", "manifests", "scheduler", file))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range cfg.Profiles {
				names = append(names, p.SchedulerName)
			}
			if diff := cmp.Diff(profiles, names); diff != "" {
				t.Fatalf("profiles (-want +got):\n%s", diff)
			}
			if !cfg.LeaderElection.LeaderElect || cfg.LeaderElection.ResourceName != "drascope-scheduler" || cfg.LeaderElection.ResourceNamespace != "kube-system" {
				t.Errorf("leader election %+v, want the lease kube-system/drascope-scheduler", cfg.LeaderElection)
			}
			for _, profile := range cfg.Profiles {
				var enabled []string
				for _, p := range profile.Plugins.MultiPoint.Enabled {
					enabled = append(enabled, p.Name)
				}
				joined := strings.Join(enabled, ",")
				if strings.Contains(joined, "DynamicResources") || strings.Contains(joined, "DefaultPreemption") || !strings.Contains(joined, "DRAScope,DRAScopePreemption") {
					t.Errorf("%s multiPoint plugins %s: want DRAScope right before DRAScopePreemption, no DynamicResources, no DefaultPreemption", profile.SchedulerName, joined)
				}
			}
		})
	}
}
