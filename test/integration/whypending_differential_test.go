package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/whypending"
)

// describedFirst holds a pod back from the scheduler while it is
// described.
const describedFirst = "drascope.test/described-first"

// caseLabel puts a case's nodes, and its pod, apart from every other.
const caseLabel = "drascope.test/case"

// liveCase is one random cluster and pod of internal/dracases made real on
// the shared control plane: drivers, classes, pools and nodes of its own,
// the devices the case has in use held by allocated claims, and the pod,
// gated, selecting the case's nodes.
type liveCase struct {
	seed   uint64
	s      *scenario
	claims string
}

// TestWhyPendingAgreesWithTheScheduler: for 200 random small clusters and
// pods, what `kubectl dra describe pod` says before the scheduler acts (the
// pod's devices fit on these nodes, or on none) is what the scheduler then
// does: it binds the pod to one of those nodes, or refuses it. The cases
// run side by side, each apart from the others (its own drivers, so no
// class or pool of another case or test reaches it), described while a
// scheduling gate holds their pods, and then let go together.
// internal/dracases draws them: node-local and network-attached pools,
// partitions with shared counters, shared devices with consumable
// capacity, taints and tolerations, admin access, prioritized lists,
// allocation mode All. A device the case withholds as Unhealthy is held by
// a claim here, as one in use.
func TestWhyPendingAgreesWithTheScheduler(t *testing.T) {
	const seeds = 200
	var cases []*liveCase
	for seed := range uint64(seeds) {
		cases = append(cases, makeLive(t, seed))
	}
	reports := make([]*whypending.Report, len(cases))
	for i, c := range cases {
		reports[i] = describeJSON(t, c.s.namespace, "pod")
	}
	for _, c := range cases {
		c.s.ungate("pod")
	}
	fitting, refused := 0, 0
	for i, c := range cases {
		fit := reports[i].Fit
		if fit == nil {
			t.Errorf("seed %d: no fit in the report of a pod with claims to allocate; claims %s", c.seed, c.claims)
			continue
		}
		pod := c.s.waitForPodOutcome("pod")
		switch {
		case fit.Count == 0 && pod.Spec.NodeName != "":
			t.Errorf("seed %d: describe pod said no node fits (%q), the scheduler bound the pod to %s; claims %s", c.seed, reports[i].Conclusion, pod.Spec.NodeName, c.claims)
		case fit.Count > 0 && pod.Spec.NodeName == "":
			t.Errorf("seed %d: describe pod said the devices fit on %v (%d nodes), the scheduler refused: %s; claims %s", c.seed, fit.Nodes, fit.Count, describeScheduling(pod), c.claims)
		case fit.Count > 0 && len(fit.Nodes) == fit.Count && !slices.Contains(fit.Nodes, pod.Spec.NodeName):
			t.Errorf("seed %d: describe pod said the devices fit on %v only, the scheduler bound the pod to %s; claims %s", c.seed, fit.Nodes, pod.Spec.NodeName, c.claims)
		case fit.Count > 0:
			fitting++
		default:
			refused++
		}
	}
	t.Logf("%d pods fit where describe pod said, %d were refused as it said", fitting, refused)
	if fitting < 20 || refused < 20 {
		t.Errorf("%d cases fit, %d do not: the cases test too little of one side", fitting, refused)
	}
}

// makeLive creates the seed's case in a scenario of its own.
func makeLive(t *testing.T, seed uint64) *liveCase {
	t.Helper()
	c := dracases.New(seed)
	s := newScenario(t, adminNamespaceLabels)
	ns := s.namespace
	drivers := strings.NewReplacer(dracases.GPUDriver, "gpu."+ns+".example", dracases.NICDriver, "nic."+ns+".example")
	prefixed := func(name string) string { return ns + "-" + name }
	ofCase := func(selector *v1.NodeSelector) *v1.NodeSelector {
		if selector == nil {
			return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{
				Key: caseLabel, Operator: v1.NodeSelectorOpIn, Values: []string{ns},
			}}}}}
		}
		selector = selector.DeepCopy()
		for i := range selector.NodeSelectorTerms {
			selector.NodeSelectorTerms[i].MatchExpressions = append(selector.NodeSelectorTerms[i].MatchExpressions,
				v1.NodeSelectorRequirement{Key: caseLabel, Operator: v1.NodeSelectorOpIn, Values: []string{ns}})
		}
		return selector
	}

	for _, node := range c.Nodes {
		labels := map[string]string{caseLabel: ns}
		for k, v := range node.Labels {
			labels[k] = v
		}
		s.addLabelledNode(node.Name, labels)
	}
	for _, slice := range c.Slices {
		slice = slice.DeepCopy()
		slice.Name = prefixed(slice.Name)
		slice.Spec.Driver = drivers.Replace(slice.Spec.Driver)
		slice.Spec.Pool.Name = prefixed(slice.Spec.Pool.Name)
		switch {
		case slice.Spec.NodeName != nil:
			slice.Spec.NodeName = ptr.To(prefixed(*slice.Spec.NodeName))
		case ptr.Deref(slice.Spec.AllNodes, false):
			slice.Spec.AllNodes, slice.Spec.NodeSelector = nil, ofCase(nil)
		case slice.Spec.NodeSelector != nil:
			slice.Spec.NodeSelector = ofCase(slice.Spec.NodeSelector)
		}
		for i := range slice.Spec.Devices {
			d := &slice.Spec.Devices[i]
			switch {
			case d.NodeName != nil:
				d.NodeName = ptr.To(prefixed(*d.NodeName))
			case ptr.Deref(d.AllNodes, false):
				d.AllNodes, d.NodeSelector = nil, ofCase(nil)
			case d.NodeSelector != nil:
				d.NodeSelector = ofCase(d.NodeSelector)
			}
		}
		s.publishSlice(slice)
	}

	// The case's classes, as the claims name them; "anything" keeps to
	// the case's drivers.
	classes := map[string]bool{"anything": true}
	className := func(name string) string {
		classes[name] = true
		return prefixed(name)
	}
	var names []string
	for _, claim := range c.Claims {
		claim = claim.DeepCopy()
		claim.Namespace, claim.UID = ns, ""
		for i := range claim.Spec.Devices.Requests {
			r := &claim.Spec.Devices.Requests[i]
			if r.Exactly != nil {
				r.Exactly.DeviceClassName = className(r.Exactly.DeviceClassName)
			}
			for j := range r.FirstAvailable {
				r.FirstAvailable[j].DeviceClassName = className(r.FirstAvailable[j].DeviceClassName)
			}
		}
		s.createClaim(claim)
		names = append(names, claim.Name)
	}
	for name := range classes {
		class := dracases.Classes[name].DeepCopy()
		class.Name = prefixed(name)
		for i := range class.Spec.Selectors {
			class.Spec.Selectors[i].CEL.Expression = drivers.Replace(class.Spec.Selectors[i].CEL.Expression)
		}
		if name == "anything" {
			class.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: drivers.Replace(fmt.Sprintf("device.driver == %q || device.driver == %q", dracases.GPUDriver, dracases.NICDriver)),
			}}}
		}
		s.createDeviceClass(class)
	}

	// The devices in use, held by claims of at most 32 requests (the API's
	// limit), as other pods' claims would hold them. A partition whose
	// shared counters the devices held before it used up is left free: no
	// allocator would have handed it out, and it is no more available
	// free than held.
	var held []resourceapi.DeviceRequestAllocationResult
	fits := countersLeft(c.Slices)
	for _, id := range slices.SortedFunc(maps.Keys(c.InUse), func(a, b structured.DeviceID) int { return strings.Compare(a.String(), b.String()) }) {
		if !fits(id) {
			continue
		}
		held = append(held, resourceapi.DeviceRequestAllocationResult{
			Driver: drivers.Replace(id.Driver.String()), Pool: prefixed(id.Pool.String()), Device: id.Device.String(),
		})
	}
	for i := 0; i < len(held); i += resourceapi.DeviceRequestsMaxSize {
		results := held[i:min(len(held), i+resourceapi.DeviceRequestsMaxSize)]
		var requests []resourceapi.DeviceRequest
		for j := range results {
			results[j].Request = fmt.Sprintf("held-%d", j)
			requests = append(requests, resourceapi.DeviceRequest{Name: results[j].Request, Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: prefixed("anything"), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			}})
		}
		holder := fmt.Sprintf("holder-%d", i/resourceapi.DeviceRequestsMaxSize)
		s.addClaimFor(holder, requests...)
		s.allocate(holder, results...)
	}

	s.addPodWith("pod", schedulerName, fromClaim(names[0]), func(pod *v1.Pod) {
		pod.Spec.ResourceClaims, pod.Spec.Containers[0].Resources.Claims = nil, nil
		for i, name := range names {
			podClaim := fmt.Sprintf("claim-%d", i)
			pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: podClaim, ResourceClaimName: ptr.To(name)})
			pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, v1.ResourceClaim{Name: podClaim})
		}
		pod.Spec.NodeSelector = map[string]string{caseLabel: ns}
		pod.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: describedFirst}}
	})
	return &liveCase{seed: seed, s: s, claims: dracases.DescribeClaims(c.Claims)}
}

// countersLeft returns a test that takes a device's counter consumption
// from what its pool's counter sets have left, and reports whether there
// was enough.
func countersLeft(listed []*resourceapi.ResourceSlice) func(structured.DeviceID) bool {
	type counter struct{ driver, pool, set, name string }
	left := map[counter]resource.Quantity{}
	consumes := map[structured.DeviceID][]resourceapi.DeviceCounterConsumption{}
	for _, slice := range listed {
		for _, set := range slice.Spec.SharedCounters {
			for name, c := range set.Counters {
				left[counter{slice.Spec.Driver, slice.Spec.Pool.Name, set.Name, name}] = c.Value.DeepCopy()
			}
		}
		for _, d := range slice.Spec.Devices {
			consumes[structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name)] = d.ConsumesCounters
		}
	}
	return func(id structured.DeviceID) bool {
		for _, consumption := range consumes[id] {
			for name, c := range consumption.Counters {
				have := left[counter{id.Driver.String(), id.Pool.String(), consumption.CounterSet, name}]
				if have.Cmp(c.Value) < 0 {
					return false
				}
			}
		}
		for _, consumption := range consumes[id] {
			for name, c := range consumption.Counters {
				key := counter{id.Driver.String(), id.Pool.String(), consumption.CounterSet, name}
				have := left[key]
				have.Sub(c.Value)
				left[key] = have
			}
		}
		return true
	}
}

// createClaim creates a claim as given.
func (s *scenario) createClaim(claim *resourceapi.ResourceClaim) {
	s.t.Helper()
	if _, err := env.client.ResourceV1().ResourceClaims(s.namespace).Create(s.ctx, claim, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating claim %s/%s: %v", s.namespace, claim.Name, err)
	}
}

// createDeviceClass creates a class; it is deleted when the test ends.
func (s *scenario) createDeviceClass(class *resourceapi.DeviceClass) {
	s.t.Helper()
	if _, err := env.client.ResourceV1().DeviceClasses().Create(s.ctx, class, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating DeviceClass %s: %v", class.Name, err)
	}
	s.t.Cleanup(func() {
		_ = env.client.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
}

// ungate removes the pod's scheduling gates: the scheduler takes it from
// here.
func (s *scenario) ungate(name string) {
	s.t.Helper()
	pod := s.getPod(name)
	pod.Spec.SchedulingGates = nil
	if _, err := env.client.CoreV1().Pods(s.namespace).Update(s.ctx, pod, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("removing the scheduling gates of pod %s/%s: %v", s.namespace, name, err)
	}
}

// waitForPodOutcome waits until the scheduler bound the pod or found it
// unschedulable, and returns it.
func (s *scenario) waitForPodOutcome(name string) *v1.Pod {
	s.t.Helper()
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = env.client.CoreV1().Pods(s.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := scheduledCondition(pod)
		return pod.Spec.NodeName != "" || c != nil && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable, nil
	})
	if err != nil {
		s.t.Fatalf("pod %s/%s neither bound nor unschedulable: %v; %s", s.namespace, name, err, describeScheduling(pod))
	}
	return pod
}

// describeJSON runs kubectl dra describe pod -o json as the cluster admin.
func describeJSON(t *testing.T, namespace, pod string) *whypending.Report {
	t.Helper()
	out, errOut, err := kubectlDRA(t, "describe", "pod", pod, "-n", namespace, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl dra describe pod %s -n %s: %v\n%s", pod, namespace, err, errOut)
	}
	var r whypending.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json is no PodDeviceReport: %v\n%s", err, out)
	}
	return &r
}
