package sandbox

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/internal/localcluster"
)

// kwokLabel marks the nodes KWOK manages.
const kwokLabel = "drascope.dev/sandbox-node"

// startNodes runs KWOK (bin/kwok, with the stage files bin/kwok-stages.yaml
// that `make tools` collects from the same KWOK version) and creates the
// nodes it then keeps Ready, with heartbeats; it also moves the pods bound
// to them to Running and finishes their deletion.
func startNodes(ctx context.Context, cp *localcluster.ControlPlane, client kubernetes.Interface, kubeconfig string, nodes []string) error {
	stages, err := localcluster.BinPath(cp.BinDir, "kwok-stages.yaml")
	if err != nil {
		return err
	}
	if _, err := cp.Run("kwok", "kwok",
		"--kubeconfig="+kubeconfig,
		"--manage-nodes-with-label-selector="+kwokLabel+"=true",
		"--config="+stages,
	); err != nil {
		return err
	}
	for _, name := range nodes {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, kwokLabel: "true"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		}}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
	}
	return nil
}
