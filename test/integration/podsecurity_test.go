package integration

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The scheduler's pod, as manifests/scheduler (kustomize) and the chart
// render it, passes Pod Security "restricted": a server-side dry run of
// the pod in a namespace that enforces the level is admitted, and the
// Deployment draws no warning there. The same pod without its seccomp
// profile is refused, so the namespace does enforce.
func TestSchedulerPodIsRestricted(t *testing.T) {
	s := newScenario(t, map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	})
	kustomized, err := exec.Command(filepath.Join(env.cp.BinDir, "kubectl"), "kustomize", filepath.Join(repoRoot, "manifests/scheduler")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize manifests/scheduler: %v", err)
	}
	warnings := &warningRecorder{}
	config := rest.CopyConfig(env.cp.Admin)
	config.WarningHandler = warnings
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	dryRun := []string{metav1.DryRunAll}
	for source, rendered := range map[string][]byte{"kustomize": kustomized, "chart": helmTemplate(t, "--set", "controlPlane.enabled=true")} {
		deployment := renderedDeployment(t, rendered)
		deployment.Namespace = s.namespace
		// The test namespace has no such ServiceAccount, which is no
		// matter of Pod Security.
		deployment.Spec.Template.Spec.ServiceAccountName = ""
		warnings.take()
		if _, err := client.AppsV1().Deployments(s.namespace).Create(s.ctx, deployment, metav1.CreateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("%s: dry run of the Deployment: %v", source, err)
		}
		if got := warnings.take(); len(got) > 0 {
			t.Errorf("%s: the Deployment draws warnings under Pod Security restricted: %v", source, got)
		}
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "drascope-scheduler", Namespace: s.namespace}, Spec: deployment.Spec.Template.Spec}
		if _, err := client.CoreV1().Pods(s.namespace).Create(s.ctx, pod, metav1.CreateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("%s: dry run of the scheduler's pod under Pod Security restricted: %v", source, err)
		}
		pod.Spec.SecurityContext.SeccompProfile = nil
		if _, err := client.CoreV1().Pods(s.namespace).Create(s.ctx, pod, metav1.CreateOptions{DryRun: dryRun}); err == nil || !strings.Contains(err.Error(), "seccompProfile") {
			t.Errorf("%s: the pod without its seccomp profile: %v; want it refused for seccompProfile", source, err)
		}
	}
}

func renderedDeployment(t *testing.T, stream []byte) *appsv1.Deployment {
	t.Helper()
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var obj map[string]any
		if err := decoder.Decode(&obj); err != nil {
			t.Fatalf("no Deployment in the rendered objects: %v", err)
		}
		if obj["kind"] != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &d); err != nil {
			t.Fatal(err)
		}
		return &d
	}
}

// warningRecorder keeps the apiserver's warnings.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}
