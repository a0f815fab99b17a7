package perf

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"

	"github.com/drascope/drascope/pkg/deviceclass"
)

// fillNamespace holds the claims fillClaims allocates.
const fillNamespace = "fill"

// fillWorkers write allocations in parallel: the apiserver, not the fill,
// is then what limits it.
const fillWorkers = 16

// fillClaims is scheduler_perf's node-update hook, run after every
// createNodes op: it allocates every unallocated claim of namespace "fill"
// to a device of its own, picked at random (with a fixed seed, so both
// schedulers get the same cluster) among the node-local devices no claim
// holds, writes the allocation as the allocator would (results and the node
// selector), and waits until the scheduler sees them. Workloads that create
// their slices and fill claims before their nodes get a full cluster in
// minutes: scheduler_perf's allocResourceClaims rebuilds the allocated set
// from every claim for each claim it allocates, which took about 15 minutes
// for 19990 claims on 2000 nodes. Every claim must ask for one device of a
// class that names only a driver; any other claim stops the run, as the
// fill could not know the allocator would agree. A workload may ask for a
// production-shaped fill (fillShape): pods holding the claims, and pods on
// every node.
func fillClaims(tCtx ktesting.TContext, sched *scheduler.Scheduler, _ *perf.Workload, nodes *v1.NodeList) error {
	client := tCtx.Client()
	list, err := client.ResourceV1().ResourceClaims(fillNamespace).List(tCtx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var claims []*resourceapi.ResourceClaim
	for i := range list.Items {
		if list.Items[i].Status.Allocation == nil {
			claims = append(claims, &list.Items[i])
		}
	}
	if len(claims) == 0 {
		return nil
	}
	driver, err := fillDriver(tCtx, claims)
	if err != nil {
		return err
	}
	free, err := freeDevices(tCtx, driver)
	if err != nil {
		return err
	}
	if len(free) < len(claims) {
		return fmt.Errorf("filling %d claims: only %d devices of %s are free", len(claims), len(free), driver)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	shape, err := fillShapeOf(tCtx)
	if err != nil {
		return err
	}
	tCtx.Logger().Info("Filling the cluster", "claims", len(claims), "namespace", fillNamespace, "driver", driver, "free", len(free),
		"podsHoldClaims", shape.podsHoldClaims, "podsPerNode", shape.podsPerNode)
	start := time.Now()
	defer func() { tCtx.Logger().Info("Filled the cluster", "claims", len(claims), "duration", time.Since(start)) }()

	group, ctx := errgroup.WithContext(tCtx)
	group.SetLimit(fillWorkers)
	for i, claim := range claims {
		d := free[i]
		group.Go(func() error {
			claim := claim.DeepCopy()
			if shape.podsHoldClaims {
				holder, err := client.CoreV1().Pods(fillNamespace).Create(ctx, holderPod(claim, d.node), metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("creating the pod holding claim %s: %w", claim.Name, err)
				}
				claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: holder.Name, UID: holder.UID}}
			}
			claim.Status.Allocation = &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: claim.Spec.Devices.Requests[0].Name, Driver: driver, Pool: d.pool, Device: d.device,
				}}},
				NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{d.node},
				}}}}},
			}
			if _, err := client.ResourceV1().ResourceClaims(fillNamespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("allocating claim %s: %w", claim.Name, err)
			}
			return nil
		})
	}
	for _, node := range nodes.Items {
		for i := range shape.podsPerNode {
			group.Go(func() error {
				// A later createNodes op that fills more claims meets
				// the earlier nodes' pods again.
				if _, err := client.CoreV1().Pods(fillNamespace).Create(ctx, plainPod(node.Name, i), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("creating a pod on node %s: %w", node.Name, err)
				}
				return nil
			})
		}
	}
	if err := group.Wait(); err != nil {
		return err
	}
	if err := waitForSchedulerToSee(tCtx, sched, driver, free[:len(claims)]); err != nil {
		return err
	}
	if !shape.podsHoldClaims && shape.podsPerNode == 0 {
		return nil
	}
	return waitForSchedulerPods(tCtx, sched)
}

// fillShape is how production-shaped a fill is, from the ConfigMap
// fillShapeName of the fill namespace, which a workload creates before its
// nodes (templates/fill-shape.yaml); without it, claims are allocated and
// nothing else. Its pods are made when the fill has claims to allocate. In production, pods hold the allocated claims and every
// node runs pods: upstream's plugins and drascope's pod-based paths
// (holders.go, preemption's release view) then cost what they cost there.
type fillShape struct {
	// podsHoldClaims: each filled claim is reserved for a pod bound to
	// its device's node.
	podsHoldClaims bool
	// podsPerNode pods without claims are bound to every node.
	podsPerNode int
}

const fillShapeName = "fill-shape"

func fillShapeOf(tCtx ktesting.TContext) (fillShape, error) {
	cm, err := tCtx.Client().CoreV1().ConfigMaps(fillNamespace).Get(tCtx, fillShapeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fillShape{}, nil
	}
	if err != nil {
		return fillShape{}, err
	}
	var shape fillShape
	if v, ok := cm.Data["podsHoldClaims"]; ok {
		if shape.podsHoldClaims, err = strconv.ParseBool(v); err != nil {
			return shape, fmt.Errorf("configmap %s/%s: podsHoldClaims: %w", fillNamespace, fillShapeName, err)
		}
	}
	if v, ok := cm.Data["podsPerNode"]; ok {
		if shape.podsPerNode, err = strconv.Atoi(v); err != nil || shape.podsPerNode < 0 {
			return shape, fmt.Errorf("configmap %s/%s: podsPerNode %q: want a count", fillNamespace, fillShapeName, v)
		}
	}
	return shape, nil
}

// holderPod is a running pod's spec, bound to node, that uses claim.
func holderPod(claim *resourceapi.ResourceClaim, node string) *v1.Pod {
	pod := plainPod(node, 0)
	pod.Name = claim.Name + "-holder"
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "device", ResourceClaimName: &claim.Name}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "device"}}
	return pod
}

// plainPod is the i-th pod without claims bound to node.
func plainPod(node string, i int) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-pod-%d", node, i), Namespace: fillNamespace},
		Spec: v1.PodSpec{
			NodeName:   node,
			Containers: []v1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// waitForSchedulerPods waits until the scheduler's cache has every pod
// bound so far: the measured pods would otherwise meet emptier nodes.
func waitForSchedulerPods(tCtx ktesting.TContext, sched *scheduler.Scheduler) error {
	list, err := tCtx.Client().CoreV1().Pods("").List(tCtx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
	if err != nil {
		return err
	}
	var cached int
	err = wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		cached, err = sched.Cache.PodCount()
		return err == nil && cached >= len(list.Items), nil
	})
	if err != nil {
		return fmt.Errorf("the scheduler's cache has %d of %d bound pods: %w", cached, len(list.Items), err)
	}
	return nil
}

// waitForSchedulerToSee waits until every profile's DRA manager counts the
// filled devices as allocated: pods created before would race the fill for
// them, and the run would measure an emptier cluster than it says.
func waitForSchedulerToSee(tCtx ktesting.TContext, sched *scheduler.Scheduler, driver string, filled []fillDevice) error {
	var missing int
	err := wait.PollUntilContextTimeout(tCtx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		missing = 0
		for _, fw := range sched.Profiles {
			allocated, err := fw.SharedDRAManager().ResourceClaims().ListAllAllocatedDevices()
			if err != nil {
				return false, nil
			}
			for _, d := range filled {
				if !allocated.Has(structured.MakeDeviceID(driver, d.pool, d.device)) {
					missing++
				}
			}
		}
		return missing == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the scheduler does not see %d of the %d filled devices allocated: %w", missing, len(filled), err)
	}
	return nil
}

// fillDriver is the one driver the claims' requests can be allocated from.
func fillDriver(tCtx ktesting.TContext, claims []*resourceapi.ResourceClaim) (string, error) {
	classes := sets.New[string]()
	for _, claim := range claims {
		requests := claim.Spec.Devices.Requests
		if len(requests) != 1 || requests[0].Exactly == nil || requests[0].Exactly.Count > 1 ||
			requests[0].Exactly.AllocationMode != resourceapi.DeviceAllocationModeExactCount || len(requests[0].Exactly.Selectors) > 0 {
			return "", fmt.Errorf("claim %s/%s: the fill allocates one request of one device without selectors", claim.Namespace, claim.Name)
		}
		classes.Insert(requests[0].Exactly.DeviceClassName)
	}
	if classes.Len() != 1 {
		return "", fmt.Errorf("the fill claims ask for classes %v: want one", sets.List(classes))
	}
	name := sets.List(classes)[0]
	class, err := tCtx.Client().ResourceV1().DeviceClasses().Get(tCtx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	driver, ok := deviceclass.Driver(class)
	if !ok || len(class.Spec.Selectors) != 1 {
		return "", fmt.Errorf("class %s: the fill needs one CEL selector naming only the driver", name)
	}
	return driver, nil
}

type fillDevice struct{ node, pool, device string }

// freeDevices are the driver's node-local devices without taints that no
// claim holds, in a fixed order.
func freeDevices(tCtx ktesting.TContext, driver string) ([]fillDevice, error) {
	held := sets.New[fillDevice]()
	all, err := tCtx.Client().ResourceV1().ResourceClaims("").List(tCtx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, claim := range all.Items {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver == driver {
				held.Insert(fillDevice{pool: r.Pool, device: r.Device})
			}
		}
	}
	list, err := tCtx.Client().ResourceV1().ResourceSlices().List(tCtx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var free []fillDevice
	for _, slice := range list.Items {
		if slice.Spec.Driver != driver || slice.Spec.NodeName == nil {
			continue
		}
		for _, d := range slice.Spec.Devices {
			if len(d.Taints) == 0 && len(d.ConsumesCounters) == 0 && !held.Has(fillDevice{pool: slice.Spec.Pool.Name, device: d.Name}) {
				free = append(free, fillDevice{node: *slice.Spec.NodeName, pool: slice.Spec.Pool.Name, device: d.Name})
			}
		}
	}
	slices.SortFunc(free, func(a, b fillDevice) int {
		return cmp.Or(cmp.Compare(a.pool, b.pool), cmp.Compare(a.device, b.device))
	})
	return free, nil
}

// unfilledClaims counts the claims of the fill namespace left unallocated:
// a workload that has them did not run on the cluster it describes.
func unfilledClaims(tCtx ktesting.TContext) (int, error) {
	list, err := tCtx.Client().ResourceV1().ResourceClaims(fillNamespace).List(tCtx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, claim := range list.Items {
		if claim.Status.Allocation == nil {
			n++
		}
	}
	return n, nil
}
