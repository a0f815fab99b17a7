package sandbox

// Step 1: training pods with claim templates fill part of the cluster.

import (
	"context"
	"fmt"
)

func (d *demo) train(ctx context.Context) error {
	if err := d.namespace(ctx, "training", nil); err != nil {
		return err
	}
	d.say("$ kubectl apply -n training -f manifests/examples/demo/train/gpu-claim-template.yaml")
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
	d.say("created %d training pods from manifests/examples/demo/train/trainer.yaml, each with a claim from template training/gpu (class %s): %d on %s, %d on %s", n, gpuClass, d.gpus, d.nodes[0], n-d.gpus, d.nodes[1])
	if _, err := d.waitRunning(ctx, "training", "app=trainer", n); err != nil {
		return err
	}
	if err := d.waitAllocated(ctx, n); err != nil {
		return err
	}
	_, err := d.kubectlDRA("pools")
	return err
}
