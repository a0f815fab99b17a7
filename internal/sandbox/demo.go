package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/manifests"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	"github.com/drascope/drascope/pkg/kubectldra"
)

const (
	schedulerName = "drascope-scheduler"
	stepTimeout   = 2 * time.Minute
)

// demo walks through drascope's features on the sandbox, printing what it
// does and the commands a person would run; every step checks its outcome.
type demo struct {
	out        io.Writer
	client     kubernetes.Interface
	pools      versioned.Interface
	kubeconfig string
	kubelet    *simulatedKubelet
	nodes      []string
	gpus       int
	// For the alerts step: drascope-alerts's directory, and the scheduler's
	// /metrics and a token that may read it.
	binDir        string
	schedulerPort int
	adminToken    string
}

func (d *demo) run(ctx context.Context) error {
	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"Training pods with claim templates fill part of the cluster", d.train},
		{"A monitoring DaemonSet with admin access lands on every node, full ones too", d.monitor},
		{"The same DaemonSet in a namespace without the admin-access label waits", d.monitorUnlabelled},
		{"A GPU is reported Unhealthy; the replacement pod gets another one", d.unhealthy},
		{"The pools fill up; a pending pod says why, and describe node shows where there is room", d.fill},
		{"The fabric pool runs dry; the shipped alert rules, over the scheduler's metrics, say so", d.alerts},
		{"An urgent inference pod preempts a training pod on a full node and takes its GPU", d.preempt},
		{"Two half-GPU pods share one partitionable GPU, so a pod that needs a whole one still fits", d.deviceChoice},
		{"A gang of three places whole, with devices chosen for all its members at once", d.gang},
		{"A DeviceQuota holds a namespace to one GPU: the second pod waits, and runs once the first goes", d.quota},
	}
	for i, step := range steps {
		fmt.Fprintf(d.out, "\n=== Step %d of %d: %s\n", i+1, len(steps), step.title)
		stepCtx, cancel := context.WithTimeout(ctx, stepTimeout)
		err := step.run(stepCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("demo step %d (%s): %w", i+1, step.title, err)
		}
		fmt.Fprintf(d.out, "--- Step %d: OK\n", i+1)
	}
	return nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

// kubectlDRA runs `kubectl dra` as a person would, and prints it.
func (d *demo) kubectlDRA(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := kubectldra.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig=" + d.kubeconfig}, args...))
	err := cmd.Execute()
	d.say("$ kubectl dra %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	return out.String(), err
}

func (d *demo) namespace(ctx context.Context, name string, labels map[string]string) error {
	d.say("$ kubectl create namespace %s%s", name, labelNote(name, labels))
	if _, err := d.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The serviceaccount controller makes the default ServiceAccount pods need.
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := d.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func labelNote(namespace string, labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	var parts []string
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	return " && kubectl label namespace " + namespace + " " + strings.Join(parts, " ")
}

// demoDir holds the demo's manifests, embedded from manifests/examples/demo:
// what the demo creates is what a person applies by hand.
const demoDir = "examples/demo/"

// demoObject returns the object of type T in one of the demo's manifests.
func demoObject[T runtime.Object](file string) (T, error) {
	var zero T
	data, err := manifests.Files.ReadFile(demoDir + file)
	if err != nil {
		return zero, err
	}
	objects, err := localcluster.Decode("manifests/"+demoDir+file, data)
	if err != nil {
		return zero, err
	}
	for _, obj := range objects {
		if o, ok := obj.(T); ok {
			return o, nil
		}
	}
	return zero, fmt.Errorf("manifests/%s%s holds no %T", demoDir, file, zero)
}

// template creates a demo claim template, from gpu-claim-template.yaml or
// (admin access) gpu-monitor.yaml.
func (d *demo) template(ctx context.Context, namespace string, adminAccess bool) error {
	file := "train/gpu-claim-template.yaml"
	if adminAccess {
		file = "admin-access-monitor/gpu-monitor.yaml"
	}
	template, err := demoObject[*resourceapi.ResourceClaimTemplate](file)
	if err != nil {
		return err
	}
	_, err = d.client.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, template, metav1.CreateOptions{})
	return err
}

// pod creates trainer.yaml's pod under name, pinned to node.
func (d *demo) pod(ctx context.Context, namespace, name, node string) error {
	pod, err := demoObject[*v1.Pod]("train/trainer.yaml")
	if err != nil {
		return err
	}
	pod.Name = name
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	_, err = d.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// createPods creates the claim template and the pod of a demo manifest, in
// namespace training, the pod once per name, pinned to node unless node is
// empty.
func (d *demo) createPods(ctx context.Context, file, node string, names ...string) error {
	template, err := demoObject[*resourceapi.ResourceClaimTemplate](file)
	if err != nil {
		return err
	}
	if _, err := d.client.ResourceV1().ResourceClaimTemplates("training").Create(ctx, template, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod, err := demoObject[*v1.Pod](file)
	if err != nil {
		return err
	}
	for _, name := range names {
		p := pod.DeepCopy()
		p.Name = name
		if node != "" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		}
		if _, err := d.client.CoreV1().Pods("training").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// waitRunning waits until n pods of the selector run, and returns them.
func (d *demo) waitRunning(ctx context.Context, namespace, selector string, n int) ([]v1.Pod, error) {
	var pods []v1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := d.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		return len(pods) >= n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d running pods (%s) in %s: %d run", n, selector, namespace, len(pods))
	}
	return pods, nil
}

// waitPending waits until the pod is unschedulable with a message
// containing want, and returns the message.
func (d *demo) waitPending(ctx context.Context, namespace, name, want string) (string, error) {
	message := ""
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pod, err := d.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s/%s was scheduled to %s", namespace, name, pod.Spec.NodeName)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
				message = c.Message
			}
		}
		return strings.Contains(message, want), nil
	})
	if err != nil {
		return message, fmt.Errorf("pod %s/%s: want it pending with %q, last message %q: %w", namespace, name, want, message, err)
	}
	return message, nil
}

// allocated sums the allocated devices the ResourcePools report, once the
// publisher has caught up with want (or returns what it has at the timeout).
func (d *demo) waitAllocated(ctx context.Context, want int) error {
	got := -1
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := d.pools.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		got = 0
		for _, rp := range list.Items {
			if rp.Status.Summary != nil {
				got += int(rp.Status.Summary.AllocatedDevices)
			}
		}
		return got == want, nil
	})
	if err != nil {
		return fmt.Errorf("ResourcePools count %d allocated devices, want %d", got, want)
	}
	return nil
}

// quietDRA runs kubectl dra without printing it.
func (d *demo) quietDRA(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := kubectldra.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: io.Discard})
	cmd.SetArgs(append([]string{"--kubeconfig=" + d.kubeconfig}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func (d *demo) deviceOf(ctx context.Context, pod *v1.Pod) (string, error) {
	for _, status := range pod.Status.ResourceClaimStatuses {
		if status.ResourceClaimName == nil {
			continue
		}
		claim, err := d.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *status.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if claim.Status.Allocation != nil && len(claim.Status.Allocation.Devices.Results) > 0 {
			return claim.Status.Allocation.Devices.Results[0].Device, nil
		}
	}
	return "", fmt.Errorf("pod %s/%s holds no device", pod.Namespace, pod.Name)
}
