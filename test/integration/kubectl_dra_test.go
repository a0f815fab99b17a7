package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	drahealth "github.com/drascope/drascope/pkg/health"
)

func TestKubectlDRAPools(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 4)
	name := poolObjectName(t, node)
	s.addClaim("one", false)
	s.allocateDirectly("one", node, "gpu-0")
	rp := s.waitForResourcePool(name, "1 of 4 allocated", summaryIs(4, 1, 3, 0))
	filter := []string{"pools", "--driver", driverName, "--node", node}

	out, errOut, err := kubectlDRA(t, filter...)
	if err != nil || errOut != "" {
		t.Fatalf("kubectl dra pools: %v\n%s", err, errOut)
	}
	t.Logf("kubectl dra pools --driver %s --node %s\n%s", driverName, node, out)
	want := [][]string{
		{"NAME", "DRIVER", "POOL", "NODE", "TOTAL", "ALLOCATED", "AVAILABLE", "UNAVAILABLE"},
		{name, driverName, node, node, "4", "1", "3", "0"},
	}
	if got := rows(out); !equalRows(got, want) {
		t.Errorf("output rows %q, want %q", got, want)
	}

	out, _, err = kubectlDRA(t, append(filter, "-o", "wide")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl dra pools ... -o wide\n%s", out)
	got := rows(out)
	if len(got) != 2 || strings.Join(got[0], " ") != "NAME DRIVER POOL NODE TOTAL ALLOCATED AVAILABLE UNAVAILABLE PARTIAL SLICES VALID AGE" ||
		len(got[1]) != 12 || strings.Join(got[1][8:11], " ") != "0 1/1 True" {
		t.Errorf("wide output %q", got)
	}

	out, _, err = kubectlDRA(t, append(filter, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.ResourcePoolList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("-o json does not decode into a ResourcePoolList: %v\n%s", err, out)
	}
	if list.Kind != "ResourcePoolList" || len(list.Items) != 1 || list.Items[0].Spec != rp.Spec || *list.Items[0].Status.Summary != *rp.Status.Summary {
		t.Errorf("-o json: %+v, want the one ResourcePool %+v", list, rp)
	}

	// --fit: the node has 3 available devices, so it could take 3, not 4.
	for n, want := range map[string]string{"3": "1 of 1 nodes have 3 or more available devices: " + node, "4": "0 of 1 nodes have 4 or more available devices"} {
		out, _, err = kubectlDRA(t, append(filter, "--fit", n)...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("--fit %s: %v, output:\n%s\nwant a line %q", n, err, out, want)
		}
	}
	if _, _, err := kubectlDRA(t, append(filter, "--fit", "3", "-o", "yaml")...); err == nil || !strings.Contains(err.Error(), "--fit adds a line to the table") {
		t.Errorf("--fit with -o yaml: want an error, got %v", err)
	}

	out, errOut, err = kubectlDRA(t, "pools", "--driver", "nothing.example.com")
	if err != nil || out != "" || !strings.Contains(errOut, "No pools found.") {
		t.Errorf("an unknown driver: err %v, stdout %q, stderr %q; want no error and \"No pools found.\"", err, out, errOut)
	}
	if _, _, err := kubectlDRA(t, "pools", "-o", "table"); err == nil || !strings.Contains(err.Error(), `unknown output format "table"`) {
		t.Errorf("a bad -o: want an error naming the format, got %v", err)
	}
}

// A user who may read nothing DRA gets a clear line, never an error.
func TestKubectlDRAPoolsWithoutPermission(t *testing.T) {
	s := newScenario(t, nil)
	s.addNode("gpus", 1)
	// Only enough to be a user at all: discovery.
	user := s.namespace + "-reader"
	out, errOut, err := kubectlDRA(t, "pools", "--as", user)
	if err != nil {
		t.Fatalf("missing permission gave an error: %v", err)
	}
	if out != "" || !strings.Contains(errOut, "(listing ResourcePools is not permitted") || !strings.Contains(errOut, "(listing ResourceSlices is not permitted: no pools can be shown)") {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}

	// Allowed to read slices but not claims: counts without allocations, said so.
	grantClusterRead(t, s, user, rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}})
	node := s.nodes[0]
	out, errOut, err = kubectlDRA(t, "pools", "--as", user, "--node", node)
	if err != nil {
		t.Fatalf("missing permission gave an error: %v", err)
	}
	if !strings.Contains(errOut, "(listing ResourceClaims is not permitted: allocations are not counted)") {
		t.Errorf("stderr %q does not say that allocations are not counted", errOut)
	}
	if got := rows(out); len(got) != 2 || strings.Join(got[1][1:], " ") != driverName+" "+node+" "+node+" 1 0 1 0" {
		t.Errorf("computed rows %q", got)
	}
}

func TestKubectlDRADescribePool(t *testing.T) {
	s := newScenario(t, adminNamespaceLabels)
	node := s.addNode("gpus", 0)
	pool := resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: sliceName(node)},
		Spec:       resourceapi.ResourceSliceSpec{Driver: driverName, Pool: pool, NodeName: &node},
	}
	for _, d := range gpuNames(0, 4) {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: d})
	}
	slice.Spec.Devices[3].Taints = []resourceapi.DeviceTaint{{Key: "broken", Value: "fan", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	s.publishSlice(slice)
	name := poolObjectName(t, node)
	// gpu-0: two claims (a conflict); gpu-1: an admin-access observer.
	s.addClaim("first", false)
	s.addClaim("second", false)
	s.addClaim("monitor", true)
	s.allocateDirectly("first", node, "gpu-0")
	s.allocateDirectly("second", node, "gpu-0")
	monitor := s.getClaim("monitor")
	monitor.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driverName, Pool: node, Device: "gpu-1", AdminAccess: ptr.To(true)}},
	}}
	if _, err := env.client.ResourceV1().ResourceClaims(s.namespace).UpdateStatus(s.ctx, monitor, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitForResourcePool(name, "the conflict reported", func(rp *v1alpha1.ResourcePool) bool {
		return conditionIs(v1alpha1.ConditionValid, metav1.ConditionFalse)(rp) && summaryIs(4, 1, 2, 1)(rp)
	})

	var out string
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		var err error
		out, _, err = kubectlDRA(t, "describe", "pool", name)
		return err == nil && strings.Contains(out, "DeviceAllocationConflict"), err
	})
	if err != nil {
		t.Fatalf("kubectl dra describe pool %s: %v\n%s", name, err, out)
	}
	t.Logf("kubectl dra describe pool %s\n%s", name, out)
	ns := s.namespace
	for _, want := range [][]string{
		{"Name:", name},
		{"Driver:", driverName},
		{"Pool:", node},
		{"Node:", node},
		{"Total:", "4"},
		{"Allocated:", "1"},
		{"Available:", "2"},
		{"Unavailable:", "1"},
		{"Complete", "True", "AllSlicesPresent"},
		{"Valid", "False", "ValidationFailed"},
		{"Slices:", "1", "of", "1"},
		{"device", driverName + "/" + node + "/gpu-0", "is", "allocated", "to", "2", "claims"},
		{"Over-allocated", "Devices:", "1"},
		{"Over-consumed", "Counters:", "0"},
		{"gpu-0", "Allocated", "Unknown", ns + "/first,", ns + "/second"},
		{"gpu-1", "Available", "Unknown", "<none>", "observed", "by", ns + "/monitor", "(admin", "access)"},
		{"gpu-2", "Available", "Unknown", "<none>"},
		{"gpu-3", "Unavailable", "Unknown", "<none>", "Tainted:", "broken=fan:NoSchedule"},
		{"Warning", "DeviceAllocationConflict"},
	} {
		if findLine(out, want...) == nil {
			t.Errorf("no line starting %q in:\n%s", want, out)
		}
	}

	// Same pool by driver and pool name.
	byID, _, err := kubectlDRA(t, "describe", "pool", "--driver", driverName, "--pool", node)
	if err != nil || findLine(byID, "Name:", name) == nil {
		t.Errorf("describe pool --driver --pool: %v\n%s", err, byID)
	}

	// May read ResourcePools and slices, not claims: summary, and one line
	// instead of the device detail. Never an error.
	user := s.namespace + "-viewer"
	grantClusterRead(t, s, user,
		rbacv1.PolicyRule{APIGroups: []string{"drascope.dev"}, Resources: []string{"resourcepools"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}})
	limited, _, err := kubectlDRA(t, "describe", "pool", name, "--as", user)
	if err != nil {
		t.Fatalf("missing permission gave an error: %v", err)
	}
	t.Logf("kubectl dra describe pool %s --as %s\n%s", name, user, limited)
	if findLine(limited, "Total:", "4") == nil || findLine(limited, "Device", "Details:", "(listing", "ResourceClaims", "is", "not", "permitted:", "device", "detail", "hidden)") == nil {
		t.Errorf("want the summary and the hidden-detail line:\n%s", limited)
	}
	if strings.Contains(limited, "/first") || strings.Contains(limited, "/monitor") {
		t.Errorf("a user who may not list claims sees claim names:\n%s", limited)
	}

	if _, _, err := kubectlDRA(t, "describe", "pool", "no-such-pool"); err == nil || !strings.Contains(err.Error(), `pool "no-such-pool" not found`) {
		t.Errorf("an unknown pool: want a not-found error, got %v", err)
	}
	if _, _, err := kubectlDRA(t, "describe", "pool"); err == nil || !strings.Contains(err.Error(), "either NAME, or both --driver and --pool") {
		t.Errorf("no pool named: want a usage error, got %v", err)
	}
	// End the deliberate conflict before the scenario's invariant check.
	if err := env.client.ResourceV1().ResourceClaims(s.namespace).Delete(s.ctx, "second", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestKubectlDRADescribeNode(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	empty := s.addNode("cpus", 0)
	s.addClaimTemplate("gpu", false)
	s.addPod("trainer", schedulerName, fromTemplate("gpu"))
	claim := s.podClaim(s.waitForPodScheduled("trainer"))
	device := s.allocatedDevice(claim).Device
	s.waitForResourcePool(poolObjectName(t, node), "1 allocated", summaryIs(2, 1, 1, 0))

	out, _, err := kubectlDRA(t, "describe", "node", node, "--show-devices")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl dra describe node %s --show-devices\n%s", node, out)
	for _, want := range [][]string{
		{"Name:", node},
		{"DRA", "Resources:"},
		{node, driverName, "2", "1", "1", "0", "True"},
		{"Devices", "of", poolObjectName(t, node) + ":"},
		{device, "Allocated", "Unknown", s.namespace + "/" + claim.Name},
	} {
		if findLine(out, want...) == nil {
			t.Errorf("no line starting %q in:\n%s", want, out)
		}
	}
	if strings.Count(out, "Available") != 2 { // the free device, and the pool table header
		t.Errorf("want one free device listed:\n%s", out)
	}

	out, _, err = kubectlDRA(t, "describe", "node", empty)
	if err != nil || findLine(out, "DRA", "Resources:", "<none>") == nil {
		t.Errorf("a node without pools: %v\n%s", err, out)
	}
	if _, _, err := kubectlDRA(t, "describe", "node", "no-such-node"); err == nil || !strings.Contains(err.Error(), `node "no-such-node" not found`) {
		t.Errorf("an unknown node: want a not-found error, got %v", err)
	}
}

// A user who may list claims in one namespace only sees those claims named,
// the devices other claims hold as Allocated without a name, and the counts
// of the ResourcePool.
func TestKubectlDRADescribePoolNamespaceLimited(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 3)
	name := poolObjectName(t, node)
	other := s.namespace + "-other"
	if _, err := env.client.CoreV1().Namespaces().Create(s.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs, err := env.client.ResourceV1().ResourceClaims(other).Create(s.ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: gpuClaimSpec(false),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driverName, Pool: node, Device: "gpu-1"}},
	}}
	if _, err := env.client.ResourceV1().ResourceClaims(other).UpdateStatus(s.ctx, theirs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.ResourceV1().ResourceClaims(other).Delete(context.Background(), "theirs", metav1.DeleteOptions{})
	})
	s.addClaim("mine", false)
	s.allocateDirectly("mine", node, "gpu-0")
	s.waitForResourcePool(name, "2 of 3 allocated", summaryIs(3, 2, 1, 0))

	user := s.namespace + "-dev"
	grantClusterRead(t, s, user,
		rbacv1.PolicyRule{APIGroups: []string{"drascope.dev"}, Resources: []string{"resourcepools"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}})
	if _, err := env.client.RbacV1().Roles(s.namespace).Create(s.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "claims-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().RoleBindings(s.namespace).Create(s.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "claims-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "claims-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The cluster admin sees both claims of the pool named.
	adminOut, _, err := kubectlDRA(t, "describe", "pool", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl dra describe pool %s (cluster admin)\n%s", name, adminOut)
	if findLine(adminOut, "gpu-1", "Allocated", "Unknown", other+"/theirs") == nil || findLine(adminOut, "gpu-0", "Allocated", "Unknown", s.namespace+"/mine") == nil {
		t.Errorf("the cluster admin does not see both claims named:\n%s", adminOut)
	}

	out, _, err := kubectlDRA(t, "describe", "pool", name, "--as", user, "-n", s.namespace)
	if err != nil {
		t.Fatalf("missing permission gave an error: %v", err)
	}
	t.Logf("kubectl dra describe pool %s --as %s -n %s\n%s", name, user, s.namespace, out)
	for _, want := range [][]string{
		{"Allocated:", "2"},
		{"Available:", "1"},
		{"(listing", "ResourceClaims", "is", "permitted", "in", "namespace", s.namespace, "only:"},
		{"gpu-0", "Allocated", "Unknown", s.namespace + "/mine"},
		{"gpu-1", "Allocated", "Unknown", "<not", "permitted>"},
		{"gpu-2", "Available", "Unknown", "<none>"},
	} {
		if findLine(out, want...) == nil {
			t.Errorf("no line starting %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "theirs") || strings.Contains(out, other) {
		t.Errorf("another namespace's claim is named:\n%s", out)
	}

	// Now the user may list claims in the other namespace too, and list
	// namespaces: both claims are named, whatever namespace -n says.
	role, err := env.client.RbacV1().ClusterRoles().Get(s.ctx, user, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}})
	if _, err := env.client.RbacV1().ClusterRoles().Update(s.ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().Roles(other).Create(s.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "claims-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().RoleBindings(other).Create(s.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "claims-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "claims-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.RbacV1().RoleBindings(other).Delete(context.Background(), "claims-reader", metav1.DeleteOptions{})
		_ = env.client.RbacV1().Roles(other).Delete(context.Background(), "claims-reader", metav1.DeleteOptions{})
	})
	var both string
	err = wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		// RBAC changes reach the authorizer through its informers.
		both, _, err = kubectlDRA(t, "describe", "pool", name, "--as", user, "-n", s.namespace)
		return err == nil && findLine(both, "gpu-1", "Allocated", "Unknown", other+"/theirs") != nil, nil
	})
	t.Logf("kubectl dra describe pool %s --as %s -n %s, with claims of %s readable too\n%s", name, user, s.namespace, other, both)
	if err != nil || findLine(both, "gpu-0", "Allocated", "Unknown", s.namespace+"/mine") == nil {
		t.Errorf("a user who may list the claims of both namespaces does not see both claims named (%v):\n%s", err, both)
	}
}

// A device that allows multiple allocations shows as PartiallyAllocated with
// each share's consumed capacity, and how much of its capacity is used.
func TestKubectlDRADescribeSharedDevice(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 0)
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: sliceName(node)},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driverName, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name:                     "shared-gpu",
				AllowMultipleAllocations: ptr.To(true),
				Capacity:                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("8Gi")}},
			}},
		},
	}
	s.publishSlice(slice)
	s.addClaim("share", false)
	claim := s.getClaim("share")
	shareID := types.UID(uuid.NewUUID())
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: driverName, Pool: node, Device: "shared-gpu", ShareID: &shareID,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("2Gi")},
		}},
	}}
	if _, err := env.client.ResourceV1().ResourceClaims(s.namespace).UpdateStatus(s.ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing a shared allocation: %v", err)
	}
	name := poolObjectName(t, node)
	s.waitForResourcePool(name, "1 partially allocated", func(rp *v1alpha1.ResourcePool) bool {
		return summaryIs(1, 1, 0, 0)(rp) && rp.Status.Summary.PartiallyAllocatedDevices == 1
	})

	out, _, err := kubectlDRA(t, "describe", "pool", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl dra describe pool %s\n%s", name, out)
	for _, want := range [][]string{
		{"Partially", "Allocated:", "1"},
		// Each share's consumption, then how much of the device is used.
		{"shared-gpu", "PartiallyAllocated", "Unknown", s.namespace + "/share", s.namespace + "/share", "consumes", "memory=2Gi;", "capacity", "memory", "2Gi/8Gi", "used"},
	} {
		if findLine(out, want...) == nil {
			t.Errorf("no line starting %q in:\n%s", want, out)
		}
	}
}

// kubectl dra pools --watch prints the table, then a row each time a
// pool's counts change, until stopped.
func TestKubectlDRAPoolsWatch(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	name := poolObjectName(t, node)
	s.waitForResourcePool(name, "published", summaryIs(2, 0, 2, 0))

	out, stop := startKubectlDRA(t, "pools", "--node", node, "--watch")
	want := []string{name, driverName, node, node, "2", "1", "1", "0"}
	waitForOutput := func(what string, ok func([][]string) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
			return ok(rows(out.String())), nil
		})
		if err != nil {
			t.Fatalf("kubectl dra pools --watch: no %s in:\n%s", what, out.String())
		}
	}
	waitForOutput("table", func(r [][]string) bool { return len(r) >= 2 && r[0][0] == "NAME" })

	s.addClaim("one", false)
	s.allocateDirectly("one", node, "gpu-0")
	waitForOutput("row for the allocation", func(r [][]string) bool {
		return slices.ContainsFunc(r, func(row []string) bool { return slices.Equal(row, want) })
	})
	if err := stop(); err != nil {
		t.Errorf("kubectl dra pools --watch ended with %v, want nil when stopped", err)
	}
	t.Logf("kubectl dra pools --node %s --watch\n%s", node, out.String())
	got := rows(out.String())
	if len(got) != 3 || got[0][0] != "NAME" || !slices.Equal(got[1][4:], []string{"2", "0", "2", "0"}) {
		t.Errorf("output rows %q: want the header, the pool before, and the pool after, once each", got)
	}
}

// After an uninstall (or while drascope-scheduler is scaled to zero) the
// DeviceTaintRules it wrote have no owner and nobody ends them:
// kubectl dra pools names them, with the command that deletes them, once
// the Lease is stale, and says nothing while a replica renews it. The
// scheduler is stopped meanwhile: it would delete a rule it did not write
// for an Unhealthy device.
func TestKubectlDRANamesOrphanedTaintRules(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("gpus", 2)
	s.waitForResourcePool(poolObjectName(t, node), "published", summaryIs(2, 0, 2, 0))
	leases := env.client.CoordinationV1().Leases("kube-system")
	restartScheduler(t, func() {
		rule := drahealth.RuleFor(drahealth.Report{Device: drahealth.Device{Driver: driverName, Pool: node, Name: "gpu-0"},
			Health: v1.ResourceHealthStatusUnhealthy, PodUID: "gone", Node: node, Since: time.Now()})
		if _, err := env.client.ResourceV1().DeviceTaintRules().Create(s.ctx, rule, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.client.ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
		})
		renew := func(at time.Time) {
			t.Helper()
			lease, err := leases.Get(s.ctx, "drascope-scheduler", metav1.GetOptions{})
			if isNotFound(err) {
				lease, err = leases.Create(s.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "drascope-scheduler"}}, metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To("replica-a"), ptr.To[int32](15)
			lease.Spec.RenewTime = &metav1.MicroTime{Time: at}
			if _, err := leases.Update(s.ctx, lease, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pools := []string{"pools", "--node", node}
		renew(time.Now())
		if _, errOut, err := kubectlDRA(t, pools...); err != nil || strings.Contains(errOut, "DeviceTaintRule") {
			t.Errorf("kubectl dra pools while a replica renews the Lease: err %v, warned:\n%s", err, errOut)
		}
		renew(time.Now().Add(-time.Hour))
		out, errOut, err := kubectlDRA(t, pools...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(errOut+out, "1 DeviceTaintRule(s) written by drascope-scheduler") || !strings.Contains(errOut+out, "nobody renews the Lease kube-system/drascope-scheduler") ||
			!strings.Contains(errOut+out, "kubectl delete devicetaintrules -l app.kubernetes.io/managed-by=drascope-scheduler") {
			t.Errorf("kubectl dra pools with a stale Lease does not name the orphaned rule:\n%s%s", out, errOut)
		}
		_ = leases.Delete(s.ctx, "drascope-scheduler", metav1.DeleteOptions{})
	})
}

// describe pool shows how each physical device of a partitionable pool is
// split, and the scheduler's gauge counts the whole devices left: one GPU
// split in halves, one half allocated, leaves no whole device; deleting its
// claim brings it back.
func TestKubectlDRADescribePoolShowsPhysicalDevices(t *testing.T) {
	s := newScenario(t, nil)
	node := s.addNode("parts", 0)
	pool := s.addPartitionablePool("gpu", &node)
	name := poolObjectName(t, pool)
	labels := map[string]string{"driver": driverName, "pool": pool}
	s.waitForResourcePool(name, "the pool published", summaryIs(3, 0, 3, 0))
	waitForGauge(t, env.schedulerPort, "drascope_resourcepool_whole_devices_free", labels, 1)

	s.addClaim("half", false)
	s.allocateDirectly("half", pool, "half-a")
	s.waitForResourcePool(name, "half-a allocated", summaryIs(3, 1, 1, 1))
	waitForGauge(t, env.schedulerPort, "drascope_resourcepool_whole_devices_free", labels, 0)
	out, _, err := kubectlDRA(t, "describe", "pool", name)
	if err != nil {
		t.Fatalf("kubectl dra describe pool %s: %v\n%s", name, err, out)
	}
	t.Logf("kubectl dra describe pool %s\n%s", name, out)
	for _, want := range [][]string{
		{"Physical", "Devices:", "0", "of", "1", "untouched", "(whole", "devices", "free", "in", "the", "pool:", "0)"},
		{"gpu-0", "memory", "40Gi/80Gi", "half-a"},
		{"whole", "Unavailable"},
	} {
		if findLine(out, want...) == nil {
			t.Errorf("no line starting %q in:\n%s", want, out)
		}
	}

	s.deleteClaims()
	waitForGauge(t, env.schedulerPort, "drascope_resourcepool_whole_devices_free", labels, 1)
}
