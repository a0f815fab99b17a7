package sandbox

// Step 7: an urgent pod preempts a training pod and takes its GPU.

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

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
	class, err := demoObject[*schedulingv1.PriorityClass]("preemption/production-inference.yaml")
	if err != nil {
		return err
	}
	d.say("$ kubectl apply -f manifests/examples/demo/preemption/production-inference.yaml   # value %d; the training pods have priority 0", class.Value)
	if _, err := d.client.SchedulingV1().PriorityClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := d.namespace(ctx, ns, nil); err != nil {
		return err
	}
	if err := d.template(ctx, ns, false); err != nil {
		return err
	}
	pod, err := demoObject[*v1.Pod]("preemption/inference.yaml")
	if err != nil {
		return err
	}
	pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	d.say("$ kubectl create -n %s -f manifests/examples/demo/preemption/inference.yaml   # pinned to %s, whose GPUs training pods hold", ns, node)
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
