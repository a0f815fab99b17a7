package integration

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/drascope/drascope/apis/resourcepool/v1alpha1"
	"github.com/drascope/drascope/pkg/kubectldra"
)

// kubectlDRA runs `kubectl dra` in-process as the cluster admin (or as
// another user with --as) and returns stdout and stderr.
func kubectlDRA(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	kubeconfig, err := env.cp.kubeconfig("admin", adminToken)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := kubectldra.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig=" + kubeconfig}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

// rows splits table output into whitespace-separated fields per line.
func rows(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

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
	if _, err := env.client.RbacV1().ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().ClusterRoleBindings().Create(s.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.RbacV1().ClusterRoleBindings().Delete(s.ctx, user, metav1.DeleteOptions{})
		_ = env.client.RbacV1().ClusterRoles().Delete(s.ctx, user, metav1.DeleteOptions{})
	})
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

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], " ") != strings.Join(b[i], " ") {
			return false
		}
	}
	return true
}
