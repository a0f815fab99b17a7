package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/manifests"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
	"github.com/drascope/drascope/pkg/health"
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
	// For the alerts step: promtool's directory, and the scheduler's
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
	file := "gpu-claim-template.yaml"
	if adminAccess {
		file = "gpu-monitor.yaml"
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
	pod, err := demoObject[*v1.Pod]("trainer.yaml")
	if err != nil {
		return err
	}
	pod.Name = name
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	_, err = d.client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
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

func (d *demo) train(ctx context.Context) error {
	if err := d.namespace(ctx, "training", nil); err != nil {
		return err
	}
	d.say("$ kubectl apply -n training -f manifests/examples/demo/gpu-claim-template.yaml")
	if err := d.template(ctx, "training", false); err != nil {
		return err
	}
	// The first node full, the second half full.
	n := 0
	for i := range d.gpus + d.gpus/2 {
		node := d.nodes[0]
		if i >= d.gpus {
			node = d.nodes[1]
		}
		if err := d.pod(ctx, "training", fmt.Sprintf("trainer-%d", i), node); err != nil {
			return err
		}
		n++
	}
	d.say("created %d training pods from manifests/examples/demo/trainer.yaml, each with a claim from template training/gpu (class %s): %d on %s, %d on %s", n, gpuClass, d.gpus, d.nodes[0], n-d.gpus, d.nodes[1])
	if _, err := d.waitRunning(ctx, "training", "app=trainer", n); err != nil {
		return err
	}
	if err := d.waitAllocated(ctx, n); err != nil {
		return err
	}
	_, err := d.kubectlDRA("pools")
	return err
}

// holdGate keeps DaemonSet pods from being scheduled until the demo
// removes it.
const holdGate = "drascope.dev/demo-hold"

func (d *demo) daemonSet(ctx context.Context, namespace string, gated bool) error {
	if err := d.template(ctx, namespace, true); err != nil {
		return err
	}
	d.say("$ kubectl apply -n %s -f manifests/examples/demo/gpu-monitor.yaml   # claim template with adminAccess: true, allocationMode: All over GPUs and partitions, and a DaemonSet", namespace)
	ds, err := demoObject[*appsv1.DaemonSet]("gpu-monitor.yaml")
	if err != nil {
		return err
	}
	if gated {
		ds.Spec.Template.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: holdGate}}
	}
	_, err = d.client.AppsV1().DaemonSets(namespace).Create(ctx, ds, metav1.CreateOptions{})
	return err
}

func (d *demo) monitor(ctx context.Context) error {
	if err := d.usePartitionableGPU(ctx, d.nodes[0]); err != nil {
		return err
	}
	if err := d.namespace(ctx, "monitoring", map[string]string{resourceapi.DRAAdminNamespaceLabelKey: "true"}); err != nil {
		return err
	}
	if err := d.daemonSet(ctx, "monitoring", false); err != nil {
		return err
	}
	pods, err := d.waitRunning(ctx, "monitoring", "app=gpu-monitor", len(d.nodes))
	if err != nil {
		return err
	}
	d.say("%d monitoring pods run, one per node, %s (all %d GPUs and its partitionable GPU allocated) included", len(pods), d.nodes[0], d.gpus)
	if err := d.observesWholePartition(ctx, pods, d.nodes[0]); err != nil {
		return err
	}
	// Admin access observes; it takes nothing.
	if err := d.waitAllocated(ctx, d.gpus+d.gpus/2+1); err != nil {
		return err
	}
	_, err = d.kubectlDRA("pools")
	return err
}

// usePartitionableGPU runs partition-user.yaml on node: it takes the whole
// partitionable GPU, so that the GPU's shared counters are used up.
func (d *demo) usePartitionableGPU(ctx context.Context, node string) error {
	d.say("$ kubectl apply -n training -f manifests/examples/demo/partition-user.yaml   # the whole 80Gi partition of %s's partitionable GPU", node)
	template, err := demoObject[*resourceapi.ResourceClaimTemplate]("partition-user.yaml")
	if err != nil {
		return err
	}
	if _, err := d.client.ResourceV1().ResourceClaimTemplates("training").Create(ctx, template, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod, err := demoObject[*v1.Pod]("partition-user.yaml")
	if err != nil {
		return err
	}
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	if _, err := d.client.CoreV1().Pods("training").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = d.waitRunning(ctx, "training", "app=partition-user", 1)
	return err
}

// observesWholePartition checks that the monitoring pod on node got admin
// access to every partition of its partitionable GPU, the whole one that a
// workload fully uses included: upstream 1.37 refuses that
// (kubernetes/kubernetes#140729).
func (d *demo) observesWholePartition(ctx context.Context, pods []v1.Pod, node string) error {
	for _, pod := range pods {
		if pod.Spec.NodeName != node || len(pod.Status.ResourceClaimStatuses) == 0 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			continue
		}
		claim, err := d.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var partitions []string
		if claim.Status.Allocation != nil {
			for _, r := range claim.Status.Allocation.Devices.Results {
				if r.Request == "partitions" && ptr.Deref(r.AdminAccess, false) {
					partitions = append(partitions, r.Device)
				}
			}
		}
		if !slices.Contains(partitions, "pgpu-whole") || len(partitions) != 3 {
			return fmt.Errorf("monitoring pod %s on %s observes partitions %v, want pgpu-whole and both halves with admin access", pod.Name, node, partitions)
		}
		d.say("monitoring pod %s observes %s's partitions %s with admin access, although training/partition-user uses them all (upstream 1.37 refuses this: kubernetes/kubernetes#140729)", pod.Name, node, strings.Join(partitions, ", "))
		return nil
	}
	return fmt.Errorf("no monitoring pod with a claim runs on %s", node)
}

func (d *demo) monitorUnlabelled(ctx context.Context) error {
	const ns = "monitoring-unlabelled"
	if err := d.namespace(ctx, ns, nil); err != nil {
		return err
	}
	// Without the label the apiserver refuses the claim template itself.
	err := d.template(ctx, ns, true)
	if err == nil || !strings.Contains(err.Error(), "admin-access") {
		return fmt.Errorf("the apiserver accepted an admin-access claim template in a namespace without the label: %v", err)
	}
	d.say("the apiserver refuses the claim template: %v", err)
	// The label can go after the claims were made: the apiserver only checks
	// it when a claim is created and when admin access is first granted.
	// Upstream's scheduler then reserves a device and fails in PreBind;
	// drascope refuses before anything is reserved.
	d.say("$ kubectl label namespace %s %s=true", ns, resourceapi.DRAAdminNamespaceLabelKey)
	if err := d.setAdminLabel(ctx, ns, true); err != nil {
		return err
	}
	if err := d.daemonSet(ctx, ns, true); err != nil {
		return err
	}
	d.say("(the DaemonSet's pods carry the scheduling gate %s: their claims are made, nothing is scheduled yet)", holdGate)
	var pods []v1.Pod
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"app": "gpu-monitor"}.String()})
		if err != nil {
			return false, err
		}
		pods = list.Items
		for _, p := range pods {
			if len(p.Status.ResourceClaimStatuses) == 0 {
				return false, nil
			}
		}
		return len(pods) == len(d.nodes), nil
	}); err != nil {
		return fmt.Errorf("the DaemonSet's pods did not get their claims: %w", err)
	}
	d.say("$ kubectl label namespace %s %s-", ns, resourceapi.DRAAdminNamespaceLabelKey)
	if err := d.setAdminLabel(ctx, ns, false); err != nil {
		return err
	}
	d.say("(removing the scheduling gate from the %d pods)", len(pods))
	for _, p := range pods {
		p.Spec.SchedulingGates = nil
		if _, err := d.client.CoreV1().Pods(ns).Update(ctx, &p, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	message, err := d.waitPending(ctx, ns, pods[0].Name, "admin access requires the label")
	if err != nil {
		return err
	}
	d.say("$ kubectl get pod -n %s %s -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].message}'\n%s", ns, pods[0].Name, message)
	d.say("$ kubectl delete daemonset -n %s gpu-monitor", ns)
	return d.client.AppsV1().DaemonSets(ns).Delete(ctx, "gpu-monitor", metav1.DeleteOptions{})
}

func (d *demo) setAdminLabel(ctx context.Context, namespace string, on bool) error {
	ns, err := d.client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	if on {
		ns.Labels[resourceapi.DRAAdminNamespaceLabelKey] = "true"
	} else {
		delete(ns.Labels, resourceapi.DRAAdminNamespaceLabelKey)
	}
	_, err = d.client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	return err
}

func (d *demo) unhealthy(ctx context.Context) error {
	node := d.nodes[1]
	pods, err := d.waitRunning(ctx, "training", "app=trainer", d.gpus+d.gpus/2)
	if err != nil {
		return err
	}
	var victim *v1.Pod
	for i := range pods {
		if pods[i].Spec.NodeName == node {
			victim = &pods[i]
			break
		}
	}
	if victim == nil {
		return fmt.Errorf("no training pod on %s", node)
	}
	device, err := d.deviceOf(ctx, victim)
	if err != nil {
		return err
	}
	id := gpuDriver + "/" + node + "/" + device
	d.say("the driver reports %s Unhealthy; kubelet writes it into the status of pod training/%s and of the monitoring pod that observes it", id, victim.Name)
	d.kubelet.setHealth(id, v1.ResourceHealthStatusUnhealthy, "XID 79: GPU has fallen off the bus")
	pool := gpuDriver + "." + node
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		out, err := d.quietDRA("describe", "pool", pool)
		return err == nil && strings.Contains(out, "Unhealthy"), nil
	}); err != nil {
		return fmt.Errorf("the scheduler did not learn of the Unhealthy device")
	}
	d.say("$ kubectl delete pod -n training %s", victim.Name)
	if err := d.client.CoreV1().Pods("training").Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := d.pod(ctx, "training", victim.Name+"-replacement", node); err != nil {
		return err
	}
	d.say("$ kubectl create -n training -f manifests/examples/demo/trainer.yaml   # as %s-replacement, pinned to %s like %s", victim.Name, node, victim.Name)
	var replacement *v1.Pod
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := d.client.CoreV1().Pods("training").Get(ctx, victim.Name+"-replacement", metav1.GetOptions{})
		if err != nil || p.Status.Phase != v1.PodRunning {
			return false, nil
		}
		replacement = p
		return true, nil
	}); err != nil {
		return fmt.Errorf("the replacement pod did not run")
	}
	got, err := d.deviceOf(ctx, replacement)
	if err != nil {
		return err
	}
	if got == device {
		return fmt.Errorf("the replacement pod got %s, which kubelet reported Unhealthy", device)
	}
	d.say("the replacement runs on %s, not on %s", got, device)
	var last string
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		out, err := d.quietDRA("describe", "pool", pool)
		last = out
		// The monitor holds the GPU too (admin access) and reports it as well.
		return err == nil && strings.Contains(out, "Unhealthy: reported by kubelet on node "), nil
	}); err != nil {
		return fmt.Errorf("describe pool does not show %s Unavailable (Unhealthy); it shows:\n%s", device, last)
	}
	if _, err = d.kubectlDRA("describe", "pool", pool); err != nil {
		return err
	}
	return d.showTaintRule(ctx, health.Device{Driver: gpuDriver, Pool: node, Name: device})
}

// showTaintRule waits for the DeviceTaintRule that persists an Unhealthy
// device (deviceHealth.policy Taint, the default) and prints it as kubectl
// would with these columns.
func (d *demo) showTaintRule(ctx context.Context, device health.Device) error {
	var rule *resourceapi.DeviceTaintRule
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		rule, err = d.client.ResourceV1().DeviceTaintRules().Get(ctx, health.RuleName(device), metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("no DeviceTaintRule for %s", device)
	}
	d.say("the scheduler persisted the report as a DeviceTaintRule, which every scheduler obeys and a restarted drascope reads back:")
	d.say(`$ kubectl get devicetaintrules -l %s=%s -o custom-columns='NAME:.metadata.name,DEVICE:.spec.deviceSelector.device,TAINT:.spec.taint.key,EFFECT:.spec.taint.effect,REPORTER-UID:.metadata.annotations.drascope\.dev/reporter-uid'`,
		health.ManagedByLabel, health.ManagedBy)
	w := printers.GetNewTabWriter(d.out)
	fmt.Fprintln(w, "NAME\tDEVICE\tTAINT\tEFFECT\tREPORTER-UID")
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", rule.Name, *rule.Spec.DeviceSelector.Device, rule.Spec.Taint.Key, rule.Spec.Taint.Effect, rule.Annotations[health.AnnotationReporter])
	return w.Flush()
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

func (d *demo) fill(ctx context.Context) error {
	node := d.nodes[1]
	// Half the node's GPUs run trainers, one is Unhealthy: this many fit.
	free := d.gpus - d.gpus/2 - 1
	for i := range free + 1 {
		if err := d.pod(ctx, "training", fmt.Sprintf("filler-%d", i), node); err != nil {
			return err
		}
	}
	d.say("created %d more training pods for %s, where %d GPUs are free", free+1, node, free)
	if _, err := d.waitRunning(ctx, "training", "app=trainer", d.gpus+d.gpus/2+free); err != nil {
		return err
	}
	var pending, message string
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := d.client.CoreV1().Pods("training").List(ctx, metav1.ListOptions{LabelSelector: "app=trainer"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				pending = p.Name
			}
		}
		if pending == "" {
			return false, nil
		}
		events, err := d.client.EventsV1().Events("training").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + pending})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "FailedScheduling" {
				message = e.Note
			}
		}
		return strings.Contains(message, "withheld because kubelet reported them Unhealthy"), nil
	}); err != nil {
		return fmt.Errorf("no FailedScheduling event explains why %q waits (last: %q)", pending, message)
	}
	d.say("$ kubectl events -n training --for pod/%s\nWarning  FailedScheduling  %s", pending, message)
	empty := d.nodes[len(d.nodes)-1]
	out, err := d.kubectlDRA("describe", "node", empty)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		// Pool Driver Total Allocated Available Unavailable Valid
		if len(fields) == 7 && fields[0] == empty && fields[1] == gpuDriver && fields[2] == fields[4] && fields[3] == "0" {
			d.say("%s has all %s devices free", empty, fields[4])
			return nil
		}
	}
	return fmt.Errorf("describe node %s does not show its devices free", empty)
}

// preempt fills no more: step 5 left the second node's GPUs all in use by
// training pods of priority 0. An inference pod of priority 1000, pinned
// there, preempts one of them (DefaultPreemption, fed DRAScope's dry run)
// and runs on its GPU once KWOK has finished the victim's deletion and the
// resourceclaim controller has released its claim.
func (d *demo) preempt(ctx context.Context) error {
	node := d.nodes[1]
	const ns = "inference"
	holders := map[string]string{} // device -> training pod on node
	pods, err := d.client.CoreV1().Pods("training").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pods.Items {
		if pod := &pods.Items[i]; pod.Spec.NodeName == node {
			if device, err := d.deviceOf(ctx, pod); err == nil {
				holders[device] = pod.Name
			}
		}
	}
	class, err := demoObject[*schedulingv1.PriorityClass]("production-inference.yaml")
	if err != nil {
		return err
	}
	d.say("$ kubectl apply -f manifests/examples/demo/production-inference.yaml   # value %d; the training pods have priority 0", class.Value)
	if _, err := d.client.SchedulingV1().PriorityClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := d.namespace(ctx, ns, nil); err != nil {
		return err
	}
	if err := d.template(ctx, ns, false); err != nil {
		return err
	}
	pod, err := demoObject[*v1.Pod]("inference.yaml")
	if err != nil {
		return err
	}
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	d.say("$ kubectl create -n %s -f manifests/examples/demo/inference.yaml   # pinned to %s, whose GPUs training pods hold", ns, node)
	if _, err := d.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	running, err := d.waitRunning(ctx, ns, "app=inference", 1)
	if err != nil {
		return err
	}
	device, err := d.deviceOf(ctx, &running[0])
	if err != nil {
		return err
	}
	victim, ok := holders[device]
	if !ok {
		return fmt.Errorf("inference got %s on %s, which no training pod held: nothing was preempted for it", device, node)
	}
	var note string
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		events, err := d.client.EventsV1().Events("training").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + victim})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "Preempted" {
				note = e.Note
			}
		}
		return note != "", nil
	}); err != nil {
		return fmt.Errorf("no Preempted event for training/%s, whose GPU %s inference got", victim, device)
	}
	d.say("$ kubectl events -n training --for pod/%s\nNormal  Preempted  %s", victim, note)
	pool := gpuDriver + "." + node
	var last string
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last, err = d.quietDRA("describe", "pool", pool)
		return err == nil && describesHolder(last, device, ns+"/inference-gpu-"), nil
	}); err != nil {
		return fmt.Errorf("describe pool does not show %s held by the inference pod's claim; it shows:\n%s", device, last)
	}
	d.say("%s moved from training/%s to inference/inference:", device, victim)
	d.say("$ kubectl dra describe pool %s | grep -E 'Device|%s '", pool, device)
	for _, line := range strings.Split(last, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && (fields[0] == "Device" || fields[0] == device) {
			d.say("%s", line)
		}
	}
	return nil
}

// describesHolder reports whether describe pool's output shows device held
// by a claim whose name starts with claimPrefix.
func describesHolder(out, device, claimPrefix string) bool {
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 4 && fields[0] == device && strings.HasPrefix(fields[3], claimPrefix) {
			return true
		}
	}
	return false
}
