package sandbox

// Step 9: a gang placed by choosing devices for all its members at once.

import (
	"context"
	"fmt"
	"strings"

	schedulingapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gang creates a PodGroup of three and its members, pinned to a node whose
// two partitionable GPUs are free, each member preferring a whole GPU and
// taking a half when it must. One by one (upstream), the first two take
// both GPUs whole and the third finds nothing; drascope gives one member a
// whole GPU and the other two the halves of the second.
func (d *demo) gang(ctx context.Context) error {
	node := d.nodes[len(d.nodes)-2]
	const file = "gang/gang.yaml"
	group, err := demoObject[*schedulingapi.PodGroup](file)
	if err != nil {
		return err
	}
	d.say("$ kubectl apply -n training -f manifests/examples/demo/%s   # a PodGroup of 3 (gang minCount 3); its members, pinned to %s, prefer a whole partitionable GPU and take a half when they must", file, node)
	if _, err := d.client.SchedulingV1beta1().PodGroups("training").Create(ctx, group, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := d.createPods(ctx, file, node, "gang-0", "gang-1", "gang-2"); err != nil {
		return err
	}
	pods, err := d.waitRunning(ctx, "training", "app=gang", 3)
	if err != nil {
		return err
	}
	wholes, halves := 0, map[string]int{}
	for i := range pods {
		device, err := d.deviceOf(ctx, &pods[i])
		if err != nil {
			return err
		}
		d.say("pod %s got %s", pods[i].Name, device)
		if strings.HasSuffix(device, "-whole") {
			wholes++
		} else {
			halves[physicalGPU(device)]++
		}
	}
	if wholes != 1 || len(halves) != 1 {
		return fmt.Errorf("the gang got %d whole GPUs and halves of %v; want one whole GPU and both halves of the other", wholes, halves)
	}
	d.say("all three run: one whole GPU and both halves of the other. Chosen one by one, as kube-scheduler does, the first two members take both GPUs whole and the gang waits for ever (kubernetes/kubernetes#138765); drascope chose for the three at once. See docs/gangs.md")
	return nil
}
