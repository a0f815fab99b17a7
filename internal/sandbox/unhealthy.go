package sandbox

// Step 4: a GPU is reported Unhealthy (KEP-4680); the replacement pod gets
// another one.

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/drascope/drascope/pkg/health"
)

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
	d.say("$ kubectl create -n training -f manifests/examples/demo/train/trainer.yaml   # as %s-replacement, pinned to %s like %s", victim.Name, node, victim.Name)
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
