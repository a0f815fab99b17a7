package sandbox

// Step 10: a DeviceQuota stops a namespace at its limit.

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// quota gives namespace research a DeviceQuota of one GPU, and two
// training pods on a node with GPUs free: one runs, the other waits at the
// quota, and describe pod names it; when the first pod goes, the second
// runs.
func (d *demo) quota(ctx context.Context) error {
	const namespace, dir = "research", "quota/"
	node := d.nodes[len(d.nodes)-1]
	if err := d.namespace(ctx, namespace, nil); err != nil {
		return err
	}
	quota, err := demoObject[*v1alpha1.DeviceQuota](dir + "devicequota.yaml")
	if err != nil {
		return err
	}
	d.say("$ kubectl apply -n %s -f manifests/examples/demo/%sdevicequota.yaml   # at most 1 GPU of class %s", namespace, dir, quota.Spec.Limits[0].DeviceClassName)
	if _, err := d.pools.DrascopeV1alpha1().DeviceQuotas(namespace).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := d.template(ctx, namespace, false); err != nil {
		return err
	}
	d.say("$ kubectl apply -n %s -f manifests/examples/demo/train/trainer.yaml   # twice, as trainer-0 and trainer-1, pinned to %s, which has GPUs free", namespace, node)
	for _, name := range []string{"trainer-0", "trainer-1"} {
		if err := d.pod(ctx, namespace, name, node); err != nil {
			return err
		}
	}
	running, err := d.waitRunning(ctx, namespace, "app=trainer", 1)
	if err != nil {
		return err
	}
	first := running[0].Name
	second := map[string]string{"trainer-0": "trainer-1", "trainer-1": "trainer-0"}[first]
	message, err := d.waitPending(ctx, namespace, second, "DeviceQuota "+namespace+"/"+quota.Name)
	if err != nil {
		return err
	}
	d.say("%s runs; %s waits: %s", first, second, message)
	// describe pod reads the quota's status, which the scheduler writes
	// every 2 seconds.
	var out string
	var lines []string
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		if out, err = d.quietDRA("describe", "pod", second, "-n", namespace); err != nil {
			return false, err
		}
		lines = lines[:0]
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "Quota:") || strings.HasPrefix(line, "Conclusion:") {
				lines = append(lines, line)
			}
		}
		return len(lines) == 2, nil
	})
	if err != nil {
		return fmt.Errorf("describe pod %s/%s names no quota: %w\n%s", namespace, second, err, out)
	}
	d.say("$ kubectl dra describe pod %s -n %s   # its Quota and Conclusion\n%s", second, namespace, strings.Join(lines, "\n"))
	d.say("$ kubectl delete pod -n %s %s", namespace, first)
	if err := d.client.CoreV1().Pods(namespace).Delete(ctx, first, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return err
	}
	if _, err := d.waitRunning(ctx, namespace, "app=trainer", 1); err != nil {
		return err
	}
	pod, err := d.client.CoreV1().Pods(namespace).Get(ctx, second, metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName == "" {
		return fmt.Errorf("pod %s/%s was not placed once %s went: %v", namespace, second, first, err)
	}
	d.say("%s went, its claim was released, and %s runs: the quota counts what is allocated now", first, second)
	return nil
}
