package sandbox

// Step 5: the pools fill up; a pending pod says why.

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

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
	d.say("kubectl dra describe pod says, per request, what the cluster has and what holds it:")
	out, err := d.kubectlDRA("describe", "pod", pending, "-n", "training")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Conclusion:") || !strings.Contains(out, "1 Unhealthy") {
		return fmt.Errorf("describe pod %s does not conclude with the Unhealthy GPU:\n%s", pending, out)
	}
	empty := d.nodes[len(d.nodes)-1]
	out, err = d.kubectlDRA("describe", "node", empty)
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
