package integration

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
)

// The Helm chart installs on a real apiserver and its scheduler places a
// DRA pod. Every object `helm template` renders (CRD included) is applied
// server-side as a dry run, so the apiserver checks each as it would on
// install (schemas, CEL of the admission policies, RBAC escalation); the
// scheduler binary then runs with the chart's ConfigMap as its config, on
// the shipped lease and RBAC, and binds a pod with a claim. (That the
// chart's objects equal manifests/ is hack/helm's test.)
func TestHelmChartInstalls(t *testing.T) {
	rendered := helmTemplate(t, "--set", "monitoring.dashboard=true")
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	var config string
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	applied := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading helm template's output: %v", err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil || len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: the apiserver does not serve it: %v", gvk, obj.GetName(), err)
			continue
		}
		var client dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			client = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager: "helm", Force: ptr.To(true), DryRun: []string{metav1.DryRunAll},
		}); err != nil {
			t.Errorf("installing %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		applied++
		if gvk.Kind == "ConfigMap" && obj.GetName() == "drascope-scheduler-config" {
			cm := &corev1.ConfigMap{}
			if err := utilyaml.Unmarshal(doc, cm); err != nil {
				t.Fatal(err)
			}
			config = cm.Data["config.yaml"]
		}
	}
	if applied < 10 || config == "" {
		t.Fatalf("the chart rendered %d objects, config %q: not an install", applied, config)
	}

	path, err := writeTempConfig("helm-chart", config, env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	restartScheduler(t, func() {
		b, _ := runSchedulerBinary(t, "drascope-scheduler-helm", path)
		s := newScenario(t, nil)
		s.addNode("gpus", 1)
		s.addClaimTemplate("gpu", false)
		s.addPod("worker", schedulerName, fromTemplate("gpu"))
		s.waitForPodScheduled("worker")
		b.stop()
	})
}

// helmTemplate renders charts/drascope as `helm install -n kube-system` would.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	binDir := os.Getenv("DRASCOPE_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join(repoRoot, "bin")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "helm"), append([]string{"template", "drascope", filepath.Join(repoRoot, "charts/drascope"), "--namespace", "kube-system", "--include-crds"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}
