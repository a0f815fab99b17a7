package sandbox

// Step 8: deviceChoice BestFit keeps partitionable GPUs whole.

import (
	"context"
	"fmt"
	"strings"
)

// deviceChoice puts two half-GPU pods on a node whose driver lists half 0 of
// every partitionable GPU first (nodeResources): upstream's first fit would
// split both GPUs; BestFit (the shipped config) puts both halves on one, so
// that a pod needing a whole partitionable GPU still fits. The node also runs
// a monitoring pod with admin access to all of its devices (step 2), which
// must not count as a use.
func (d *demo) deviceChoice(ctx context.Context) error {
	node := d.nodes[len(d.nodes)-1]
	const dir = "device-choice/"
	d.say("$ kubectl apply -n training -f manifests/examples/demo/%shalf-partition.yaml   # twice, pinned to %s: two pods asking for a 40Gi half of a partitionable GPU", dir, node)
	if err := d.createPods(ctx, dir+"half-partition.yaml", node, "half-partition-0", "half-partition-1"); err != nil {
		return err
	}
	pods, err := d.waitRunning(ctx, "training", "app=half-partition", 2)
	if err != nil {
		return err
	}
	var halves []string
	for i := range pods {
		device, err := d.deviceOf(ctx, &pods[i])
		if err != nil {
			return err
		}
		halves = append(halves, device)
		d.say("pod %s got %s", pods[i].Name, device)
	}
	split := physicalGPU(halves[0])
	if physicalGPU(halves[1]) != split {
		return fmt.Errorf("the two halves went to %s and %s: two partitionable GPUs split where one would do", halves[0], halves[1])
	}
	d.say("both halves are on %s, though the driver lists pgpu-1-half-0 before pgpu-0-half-1: deviceChoice BestFit tries partitions of a GPU already split first", split)

	d.say("$ kubectl apply -n training -f manifests/examples/demo/%sfull-partition.yaml   # pinned to %s: a pod that needs a whole partitionable GPU", dir, node)
	if err := d.createPods(ctx, dir+"full-partition.yaml", node, "full-partition"); err != nil {
		return err
	}
	pods, err = d.waitRunning(ctx, "training", "app=full-partition", 1)
	if err != nil {
		return err
	}
	whole, err := d.deviceOf(ctx, &pods[0])
	if err != nil {
		return err
	}
	if physicalGPU(whole) == split || !strings.HasSuffix(whole, "-whole") {
		return fmt.Errorf("pod full-partition got %s, want the whole partition of the GPU other than %s", whole, split)
	}
	d.say("pod full-partition got %s: the other GPU stayed whole (with deviceChoice FirstFit, upstream's choice, the halves take pgpu-0-half-0 and pgpu-1-half-0, and this pod waits)", whole)
	out, err := d.quietDRA("describe", "pool", gpuDriver+"."+node)
	if err != nil {
		return err
	}
	// Print the part of describe pool that shows the split.
	var section []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "Physical Devices:") || len(section) > 0 && strings.HasPrefix(line, " ") {
			section = append(section, line)
		} else if len(section) > 0 {
			break
		}
	}
	if len(section) == 0 {
		return fmt.Errorf("describe pool %s.%s shows no physical devices:\n%s", gpuDriver, node, out)
	}
	d.say("$ kubectl dra describe pool %s.%s   # its Physical Devices section\n%s", gpuDriver, node, strings.Join(section, "\n"))
	return nil
}

// physicalGPU is the partitionable GPU a partition belongs to: pgpu-1 for
// pgpu-1-half-0 (nodeResources' names).
func physicalGPU(partition string) string {
	parts := strings.SplitN(partition, "-", 3)
	if len(parts) < 2 {
		return partition
	}
	return parts[0] + "-" + parts[1]
}
