package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shippedConfigWith returns manifests/scheduler/config.yaml with each old
// string replaced by its new one; it fails the test if an old string is not
// in the shipped config, so these tests follow the config they describe.
func shippedConfigWith(t *testing.T, oldNew ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config := string(data)
	for i := 0; i < len(oldNew); i += 2 {
		if !strings.Contains(config, oldNew[i]) {
			t.Fatalf("the shipped config no longer contains %q; update this test", oldNew[i])
		}
		config = strings.ReplaceAll(config, oldNew[i], oldNew[i+1])
	}
	return config
}

// otherDRAScopeProfile is a KubeSchedulerConfiguration profile, as YAML list
// item, that runs DRAScope with args (YAML at the indentation of the args'
// fields).
func otherDRAScopeProfile(name, args string) string {
	return "- schedulerName: " + name + `
  plugins:
    multiPoint:
      enabled:
      - name: DRAScope
      disabled:
      - name: DynamicResources
  pluginConfig:
  - name: DRAScope
    args:
      ` + args + "\n"
}

func tail(text string, lines int) string {
	all := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
