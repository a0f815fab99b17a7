package perf

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/test/perf/results"
)

// The device-choice test cases' namespaces (performance-config.yaml).
const (
	partitionsNamespace = "partitions"
	wholeNamespace      = "whole"
	pairsNamespace      = "pairs"
)

// gpuUnits is what each partition profile of resourceslice-partitions.yaml
// draws from its GPU's 8-unit counter set.
var gpuUnits = map[string]int64{"quarter": 2, "half": 4, "full": 8}

const unitsPerGPU = 8

// countDeviceChoice records the device-choice test cases' outcome: the
// whole-GPU pods placed and the offline optimum beside them, and the 2-GPU
// pods placed with both GPUs under one PCIe root. Other workloads have
// none of these pods and record nothing.
func countDeviceChoice(ctx context.Context, client kubernetes.Interface, entry *results.IndexEntry) error {
	whole, err := boundPods(ctx, client, wholeNamespace)
	if err != nil {
		return err
	}
	if len(whole.created) > 0 {
		entry.WholePods, entry.WholePodsPlaced = len(whole.created), len(whole.bound)
		if entry.WholePodsOptimum, err = wholeGPUOptimum(ctx, client, whole.created); err != nil {
			return err
		}
	}
	pairs, err := boundPods(ctx, client, pairsNamespace)
	if err != nil || len(pairs.created) == 0 {
		return err
	}
	entry.PairPods, entry.PairPodsPlaced = len(pairs.created), len(pairs.bound)
	roots, err := pcieRoots(ctx, client)
	if err != nil {
		return err
	}
	for _, pod := range pairs.bound {
		claim, err := claimOf(ctx, client, pod)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, r := range claim.Status.Allocation.Devices.Results {
			seen[roots[r.Driver+"/"+r.Pool+"/"+r.Device]] = true
		}
		if len(seen) == 1 {
			entry.PairsOneRoot++
		}
	}
	return nil
}

// podsOf are the pods of a namespace, and those bound to a node.
type podsOf struct{ created, bound []*v1.Pod }

func boundPods(ctx context.Context, client kubernetes.Interface, namespace string) (podsOf, error) {
	var out podsOf
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		out.created = append(out.created, pod)
		if pod.Spec.NodeName != "" {
			out.bound = append(out.bound, pod)
		}
	}
	return out, nil
}

// claimOf returns the allocated claim of a pod with one claim.
func claimOf(ctx context.Context, client kubernetes.Interface, pod *v1.Pod) (*resourceapi.ResourceClaim, error) {
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return nil, fmt.Errorf("pod %s/%s is bound but names no generated claim", pod.Namespace, pod.Name)
	}
	claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s of bound pod %s is not allocated", claim.Namespace, claim.Name, pod.Name)
	}
	return claim, nil
}

// wholeGPUOptimum is how many whole-GPU pods an offline optimum places
// beside the partitions that were placed, node by node (every pod is pinned
// to its node): on each node, its GPUs less the fewest that hold its
// partitions, at most the whole-GPU pods pinned there. Halves and quarters
// pack an 8-unit GPU exactly, so the fewest is the node's partition units
// over 8, rounded up.
func wholeGPUOptimum(ctx context.Context, client kubernetes.Interface, whole []*v1.Pod) (int, error) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	gpus := map[string]int{}
	for _, slice := range list.Items {
		if slice.Spec.NodeName != nil {
			gpus[*slice.Spec.NodeName] += len(slice.Spec.SharedCounters)
		}
	}
	partitions, err := boundPods(ctx, client, partitionsNamespace)
	if err != nil {
		return 0, err
	}
	units := map[string]int64{}
	for _, pod := range partitions.bound {
		claim, err := claimOf(ctx, client, pod)
		if err != nil {
			return 0, err
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			u, ok := gpuUnits[profileOf(r.Device)]
			if !ok {
				return 0, fmt.Errorf("claim %s/%s holds %s, which is no partition of resourceslice-partitions.yaml", claim.Namespace, claim.Name, r.Device)
			}
			units[pod.Spec.NodeName] += u
		}
	}
	wanted := map[string]int{}
	for _, pod := range whole {
		node, err := pinnedNode(pod)
		if err != nil {
			return 0, err
		}
		wanted[node]++
	}
	optimum := 0
	for node, n := range wanted {
		used := int((units[node] + unitsPerGPU - 1) / unitsPerGPU)
		optimum += max(0, min(n, gpus[node]-used))
	}
	return optimum, nil
}

// pinnedNode reads the node a pod of pod-pinned.yaml is pinned to.
func pinnedNode(pod *v1.Pod) (string, error) {
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0], nil
				}
			}
		}
	}
	return "", fmt.Errorf("pod %s/%s is pinned to no node by metadata.name", pod.Namespace, pod.Name)
}

// profileOf reads the profile from a partition's name (gpu-I-quarter-J,
// gpu-I-half-J, gpu-I-full).
func profileOf(device string) string {
	parts := strings.Split(device, "-")
	if len(parts) < 3 {
		return ""
	}
	return parts[2]
}

// pcieRoots maps each device (driver/pool/device) to its
// resource.kubernetes.io/pcieRoot attribute.
func pcieRoots(ctx context.Context, client kubernetes.Interface) (map[string]string, error) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	roots := map[string]string{}
	for _, slice := range list.Items {
		for _, d := range slice.Spec.Devices {
			if a, ok := d.Attributes["resource.kubernetes.io/pcieRoot"]; ok && a.StringValue != nil {
				roots[slice.Spec.Driver+"/"+slice.Spec.Pool.Name+"/"+d.Name] = *a.StringValue
			}
		}
	}
	return roots, nil
}
