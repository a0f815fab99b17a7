package sandbox

// Steps 2 and 3: a monitoring DaemonSet with admin access (KEP-5018), in
// a labelled namespace and in one without the label.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// holdGate keeps DaemonSet pods from being scheduled until the demo
// removes it.
const holdGate = "drascope.dev/demo-hold"

func (d *demo) daemonSet(ctx context.Context, namespace string, gated bool) error {
	if err := d.template(ctx, namespace, true); err != nil {
		return err
	}
	d.say("$ kubectl apply -n %s -f manifests/examples/demo/admin-access-monitor/gpu-monitor.yaml   # claim template with adminAccess: true, allocationMode: All over GPUs and partitions, and a DaemonSet", namespace)
	ds, err := demoObject[*appsv1.DaemonSet]("admin-access-monitor/gpu-monitor.yaml")
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
	d.say("%d monitoring pods run, one per node, %s (all %d GPUs and a partitionable GPU allocated) included", len(pods), d.nodes[0], d.gpus)
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

// usePartitionableGPU runs partition-user.yaml on node: it takes a whole
// partitionable GPU (pgpu-0-whole), so that the GPU's shared counters are
// used up.
func (d *demo) usePartitionableGPU(ctx context.Context, node string) error {
	d.say("$ kubectl apply -n training -f manifests/examples/demo/admin-access-monitor/partition-user.yaml   # the whole 80Gi partition of one of %s's partitionable GPUs", node)
	if err := d.createPods(ctx, "admin-access-monitor/partition-user.yaml", node, "partition-user"); err != nil {
		return err
	}
	pods, err := d.waitRunning(ctx, "training", "app=partition-user", 1)
	if err != nil {
		return err
	}
	device, err := d.deviceOf(ctx, &pods[0])
	if err != nil {
		return err
	}
	if device != "pgpu-0-whole" {
		return fmt.Errorf("partition-user got %s, want pgpu-0-whole: the first whole partition the driver lists, whichever deviceChoice", device)
	}
	return nil
}

// observesWholePartition checks that the monitoring pod on node got admin
// access to every partition of its partitionable GPUs, the whole one that a
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
		if !slices.Contains(partitions, "pgpu-0-whole") || len(partitions) != 3*partitionableGPUs {
			return fmt.Errorf("monitoring pod %s on %s observes partitions %v, want all %d, pgpu-0-whole included, with admin access", pod.Name, node, partitions, 3*partitionableGPUs)
		}
		slices.Sort(partitions)
		d.say("monitoring pod %s observes %s's partitions %s with admin access, although training/partition-user uses pgpu-0 whole (upstream 1.37 refuses this: kubernetes/kubernetes#140729)", pod.Name, node, strings.Join(partitions, ", "))
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
