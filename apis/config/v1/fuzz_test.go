package v1_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/apis/config"
	"github.com/drascope/drascope/apis/config/validation"
)

// FuzzDRAScopeArgs feeds the scheduler's config loader a DRAScope args
// block as an operator might mistype it: loading, defaulting and validation
// must never panic; what loads either validates or is refused with field
// paths under the args.
func FuzzDRAScopeArgs(f *testing.F) {
	for _, seed := range []string{
		"filterTimeout: 5s\n",
		"deviceHealth:\n  policy: Taint\n  unhealthyHoldTime: 30m\n",
		"deviceHealth:\n  policy: Evict\n",
		"poolStatus:\n  maxWritesPerSecond: -1\n  minPublishInterval: 0s\n",
		"poolStatus:\n  maxCreationsPerSecond: 0\n",
		"bindingTimeout: 100ms\n",
		"adminAccess: {requireNamespaceLabel: false}\n",
		"unknownField: 1\n",
		"deviceHealth: [1, 2]\n",
		"",
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, args string) {
		file := filepath.Join(dir, "config.yaml")
		content := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: drascope-scheduler\n  pluginConfig:\n  - name: DRAScope\n    args:\n" + indent(args, "      ")
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		logger, _ := ktesting.NewTestContext(t)
		cfg, err := options.LoadConfigFromFile(logger, file)
		if err != nil {
			return
		}
		for _, pc := range cfg.Profiles[0].PluginConfig {
			args, ok := pc.Args.(*config.DRAScopeArgs)
			if !ok {
				continue
			}
			path := field.NewPath("pluginConfig").Index(0).Child("args")
			for _, e := range validation.ValidateDRAScopeArgs(path, args, feature.Features{}) {
				if len(e.Field) < len(path.String()) || e.Field[:len(path.String())] != path.String() {
					t.Errorf("error without the args' field path: %v", e)
				}
			}
		}
	})
}

func indent(s, prefix string) string {
	if s = strings.TrimRight(s, "\n"); s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}
