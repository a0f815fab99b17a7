package tools

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart renders the objects of manifests/, chosen by its values: these
// tests keep `helm template` equal to `kubectl kustomize` for the same mode,
// so the two ways to install never drift. bin/helm and bin/kubectl come from
// the Makefile (make test-chart).

const (
	repoRoot = "../.."
	chartDir = repoRoot + "/charts/drascope"
)

type object = map[string]any

func binary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("DRASCOPE_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot, "bin")
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v (run through make test-chart, which builds it)", path, err)
	}
	return path
}

func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary(t, name), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// objects splits a YAML stream into objects by kind/namespace/name.
func objects(t *testing.T, stream []byte) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(stream), -1) {
		var obj object
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("parsing %q: %v", doc, err)
		}
		if len(obj) == 0 {
			continue
		}
		meta, _ := obj["metadata"].(object)
		key := fmt.Sprintf("%s/%v/%v", obj["kind"], meta["namespace"], meta["name"])
		if _, dup := out[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		out[key] = obj
	}
	return out
}

// render is helm template with values to --set, and flags (those that
// start with --, with the argument after them).
func render(t *testing.T, set ...string) map[string]object {
	t.Helper()
	args := []string{"template", "drascope", chartDir, "--namespace", "kube-system", "--include-crds"}
	for i := 0; i < len(set); i++ {
		if strings.HasPrefix(set[i], "--") {
			args = append(args, set[i], set[i+1])
			i++
			continue
		}
		args = append(args, "--set", set[i])
	}
	out, err := run(t, "helm", args...)
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, out)
}

const configMap = "ConfigMap/kube-system/drascope-scheduler-config"

// kustomized is kubectl kustomize of manifests/scheduler, manifests/crds
// and the other dirs given, with the generated ConfigMap's hashed name put
// back to its plain one.
func kustomized(t *testing.T, more ...string) map[string]object {
	t.Helper()
	return kustomize(t, append([]string{"manifests/scheduler", "manifests/crds"}, more...)...)
}

// kustomize is kubectl kustomize of exactly the dirs given, with the
// generated ConfigMap's hashed name put back to its plain one.
func kustomize(t *testing.T, dirs ...string) map[string]object {
	t.Helper()
	var stream []byte
	for _, dir := range dirs {
		out, err := run(t, "kubectl", "kustomize", filepath.Join(repoRoot, dir))
		if err != nil {
			t.Fatal(err)
		}
		stream = append(append(stream, out...), "\n---\n"...)
	}
	hashed := regexp.MustCompile(`drascope-scheduler-config-[a-z0-9]{10}\b`)
	return objects(t, hashed.ReplaceAll(stream, []byte("drascope-scheduler-config")))
}

// normalized makes the rendered and the kustomized objects comparable:
// the ConfigMap's config is compared as YAML (kustomize keeps the file's
// comments, the chart may not), and the chart's config checksum on the pod
// template (kustomize rolls pods through the hashed name instead) is
// dropped.
func normalized(t *testing.T, objs map[string]object) map[string]object {
	t.Helper()
	if cm, ok := objs[configMap]; ok {
		data := cm["data"].(object)
		var config object
		if err := yaml.Unmarshal([]byte(data["config.yaml"].(string)), &config); err != nil {
			t.Fatalf("config.yaml of %s: %v", configMap, err)
		}
		data["config.yaml"] = config
	}
	if d, ok := objs["Deployment/kube-system/drascope-scheduler"]; ok {
		meta := d["spec"].(object)["template"].(object)["metadata"].(object)
		if annotations, ok := meta["annotations"].(object); ok {
			if _, ok := annotations["checksum/config"]; !ok {
				t.Error("the chart's Deployment has no checksum/config annotation: pods would not roll on a config change")
			}
			delete(annotations, "checksum/config")
			if len(annotations) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	return objs
}

func compare(t *testing.T, got, want map[string]object) {
	t.Helper()
	var keys []string
	for key := range got {
		keys = append(keys, key)
	}
	for key := range want {
		if _, ok := got[key]; !ok {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		g, inChart := got[key]
		w, inManifests := want[key]
		switch {
		case !inChart:
			t.Errorf("%s: in manifests/, not rendered by the chart", key)
		case !inManifests:
			t.Errorf("%s: rendered by the chart, not in manifests/", key)
		case !reflect.DeepEqual(g, w):
			gy, _ := yaml.Marshal(g)
			wy, _ := yaml.Marshal(w)
			t.Errorf("%s differs:\nchart:\n%s\nmanifests/:\n%s", key, gy, wy)
		}
	}
}

func TestChartLints(t *testing.T) {
	if out, err := run(t, "helm", "lint", chartDir, "--namespace", "kube-system", "--strict"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The default values are the kustomize install of the second-scheduler
// mode, admission routing included (README: "Deploying"); a cluster older
// than 1.36 gets no routing policy (MutatingAdmissionPolicy v1 is 1.36's).
func TestChartDefaultsRenderTheManifests(t *testing.T) {
	compare(t, normalized(t, render(t)), normalized(t, kustomized(t, "manifests/admission")))
	compare(t, normalized(t, render(t, "--kube-version", "1.35.0")), normalized(t, kustomized(t)))
}

// controlPlane.enabled renders the Deployment as the kustomize component
// manifests/components/control-plane patches it.
func TestChartControlPlaneIsTheComponent(t *testing.T) {
	const deployment = "Deployment/kube-system/drascope-scheduler"
	want := normalized(t, kustomize(t, "manifests/examples/control-plane"))[deployment]
	got := normalized(t, render(t, "controlPlane.enabled=true"))[deployment]
	compare(t, map[string]object{deployment: got}, map[string]object{deployment: want})
	spec := got["spec"].(object)["template"].(object)["spec"].(object)
	if spec["nodeSelector"] == nil || spec["tolerations"] == nil {
		t.Errorf("controlPlane.enabled=true: nodeSelector %v, tolerations %v; want the control-plane's", spec["nodeSelector"], spec["tolerations"])
	}
}

// replaceKubeScheduler serves config-two-profiles.yaml, as the README's
// kustomize change does, and routes no pods: this one process serves
// default-scheduler too. Gangs are still disrupted whole.
func TestChartReplaceModeRendersTwoProfiles(t *testing.T) {
	want := normalized(t, kustomized(t))
	gangs, err := os.ReadFile(filepath.Join(repoRoot, "manifests/admission/gangs-disrupted-whole-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(want, normalized(t, objects(t, gangs)))
	data, err := os.ReadFile(filepath.Join(repoRoot, "manifests/scheduler/config-two-profiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var config object
	if err := yaml.Unmarshal(data, &config); err != nil {
		t.Fatal(err)
	}
	want[configMap]["data"].(object)["config.yaml"] = config
	compare(t, normalized(t, render(t, "mode=replaceKubeScheduler")), want)
}

// Plugin values land in the DRAScope args of every DRAScope profile, over
// the shipped config; the rest of the config stays.
func TestChartPluginValues(t *testing.T) {
	for _, mode := range []string{"secondScheduler", "replaceKubeScheduler"} {
		t.Run(mode, func(t *testing.T) {
			got := normalized(t, render(t, "mode="+mode, "plugin.publishResourcePools=false", "plugin.scoringStrategy=None", "plugin.deviceChoice=FirstFit", "plugin.deviceHealthPolicy=Avoid"))
			config := got[configMap]["data"].(object)["config.yaml"].(object)
			seen := 0
			for _, p := range config["profiles"].([]any) {
				entries, _ := p.(object)["pluginConfig"].([]any)
				for _, e := range entries {
					entry := e.(object)
					if entry["name"] != "DRAScope" {
						continue
					}
					seen++
					args := entry["args"].(object)
					if v := args["poolStatus"].(object)["publishResourcePools"]; v != false {
						t.Errorf("poolStatus.publishResourcePools = %v, want false", v)
					}
					if v := args["scoring"].(object)["strategy"]; v != "None" {
						t.Errorf("scoring.strategy = %v, want None", v)
					}
					if v := args["deviceChoice"]; v != "FirstFit" {
						t.Errorf("deviceChoice = %v, want FirstFit", v)
					}
					if v := args["deviceHealth"].(object)["policy"]; v != "Avoid" {
						t.Errorf("deviceHealth.policy = %v, want Avoid", v)
					}
					if v := args["adminAccess"].(object)["requireNamespaceLabel"]; v != true {
						t.Errorf("adminAccess.requireNamespaceLabel = %v, want the shipped true", v)
					}
				}
			}
			if seen == 0 {
				t.Error("no DRAScope pluginConfig in the rendered config")
			}
		})
	}
}

// Each optional part can be left out, and monitoring put in; the objects
// put in are those of manifests/monitoring.
func TestChartOptionalParts(t *testing.T) {
	off := render(t, "admissionPolicies.deviceTaintRules=false", "admissionPolicies.routeDRAPods=false", "admissionPolicies.gangsDisruptedWhole=false", "resourcePoolReaderRole=false")
	for key := range off {
		if strings.Contains(key, "AdmissionPolicy") || strings.Contains(key, "resourcepool-reader") {
			t.Errorf("%s rendered with its value off", key)
		}
	}
	on := render(t, "monitoring.prometheusRule=true", "monitoring.dashboard=true", "extraArgs={--emulated-version=1.36}", "resources.requests.memory=4Gi")
	container := on["Deployment/kube-system/drascope-scheduler"]["spec"].(object)["template"].(object)["spec"].(object)["containers"].([]any)[0].(object)
	if command := fmt.Sprint(container["command"]); !strings.HasSuffix(command, "--v=2 --emulated-version=1.36]") {
		t.Errorf("command with extraArgs: %s, want the shipped command and then --emulated-version=1.36", command)
	}
	if requests := container["resources"].(object)["requests"].(object); requests["memory"] != "4Gi" || requests["cpu"] != "250m" {
		t.Errorf("requests with resources.requests.memory=4Gi: %v, want 4Gi and the shipped CPU", requests)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "manifests/monitoring/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := objects(t, data)
	for key, obj := range want {
		if !reflect.DeepEqual(on[key], obj) {
			t.Errorf("%s: rendered differs from manifests/monitoring/prometheusrule.yaml", key)
		}
	}
	dashboard, err := os.ReadFile(filepath.Join(repoRoot, "manifests/monitoring/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	cm := on["ConfigMap/kube-system/drascope-scheduler-dashboard"]
	if cm == nil {
		t.Fatal("no dashboard ConfigMap with monitoring.dashboard=true")
	}
	if got := cm["data"].(object)["drascope-scheduler.json"]; strings.TrimSpace(fmt.Sprint(got)) != strings.TrimSpace(string(dashboard)) {
		t.Error("the dashboard ConfigMap does not hold manifests/monitoring/dashboard.json")
	}
}

// The chart refuses what it cannot install, saying what to do.
func TestChartRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"another namespace":    {args: []string{"--namespace", "gpu-system"}, want: "install drascope into kube-system"},
		"unknown mode":         {args: []string{"--namespace", "kube-system", "--set", "mode=both"}, want: `mode: "both" is not supported`},
		"extraArgs not a list": {args: []string{"--namespace", "kube-system", "--set", "extraArgs=--v=4"}, want: "extraArgs must be a list"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, "helm", append([]string{"template", "drascope", chartDir}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v: %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}
