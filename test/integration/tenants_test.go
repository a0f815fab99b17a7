package integration

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// Two tenants share a node (its name is the platform team's, not theirs).
// Tenant A's pod finds its GPU broken and is deleted; tenant B's pods take
// the other GPU and then wait for one. Nothing a user who may only read
// ResourcePools and DeviceTaintRules can read names tenant A's namespace or
// pod, nor does anything tenant B can read about its waiting pod: its
// PodScheduled message and its events.
func TestTenantsLearnNothingOfEachOther(t *testing.T) {
	platform := newScenario(t, nil)
	node := platform.addNode("shared", 2)
	onNode := func(pod *v1.Pod) { pod.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node} }
	a, b := newScenario(t, nil), newScenario(t, nil)
	a.addClaimTemplate("gpu", false)
	b.addClaimTemplate("gpu", false)

	a.addPodWith("trainer", schedulerName, fromTemplate("gpu"), onNode)
	broken := a.allocatedDevice(a.podClaim(a.waitForPodScheduled("trainer"))).Device
	a.reportHealth("trainer", health(node, broken, v1.ResourceHealthStatusUnhealthy, "Xid 79"))
	platform.waitForTaintRule(node, broken, "created from tenant A's report", ruleExists)
	a.deletePod("trainer")
	b.addPodWith("first", schedulerName, fromTemplate("gpu"), onNode)
	b.waitForPodScheduled("first")
	b.addPodWith("waiting", schedulerName, fromTemplate("gpu"), onNode)
	b.waitForWithheld("waiting", node, broken, "", "Xid 79")

	secrets := []string{a.namespace, "trainer"}
	pod := b.getPod("waiting")
	if c := scheduledCondition(pod); c == nil || containsAny(c.Message, secrets) != "" {
		t.Errorf("tenant B's waiting pod says %q; it must not name tenant A's namespace or pod", describeScheduling(pod))
	}
	events, err := env.client.CoreV1().Events(b.namespace).List(b.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if s := containsAny(e.Message, secrets); s != "" {
			t.Errorf("event %s in tenant B's namespace names %q: %s", e.Name, s, e.Message)
		}
	}

	// A reader of the cluster-scoped objects only.
	reader := "pool-reader-" + platform.namespace
	role := platform.namespace + "-taint-reader"
	if _, err := env.client.RbacV1().ClusterRoles().Create(platform.ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"devicetaintrules"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.RbacV1().ClusterRoles().Delete(platform.ctx, role, metav1.DeleteOptions{}) })
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: reader}
	platform.bindCluster("drascope:resourcepool-reader", subject)
	// bindCluster names a binding after its subject: the second is made here.
	if _, err := env.client.RbacV1().ClusterRoleBindings().Create(platform.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.client.RbacV1().ClusterRoleBindings().Delete(platform.ctx, role, metav1.DeleteOptions{})
	})
	waitForAccess(t, platform.ctx, reader, nil)

	config := impersonating(reader)
	pools, err := versioned.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	name := poolObjectName(t, node)
	platform.waitForResourcePool(name, broken+" Unavailable because Unhealthy", func(rp *v1alpha1.ResourcePool) bool {
		return deviceStatus(rp, broken).Reason == "Unhealthy"
	})
	readable := map[string]any{}
	if readable["ResourcePool "+name], err = pools.DrascopeV1alpha1().ResourcePools().Get(platform.ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the reader gets ResourcePool %s: %v", name, err)
	}
	rules, err := client.ResourceV1().DeviceTaintRules().List(platform.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the reader lists DeviceTaintRules: %v", err)
	}
	for _, rule := range rules.Items {
		if sel := rule.Spec.DeviceSelector; sel != nil && sel.Pool != nil && *sel.Pool == node {
			readable["DeviceTaintRule "+rule.Name] = rule
		}
	}
	if len(readable) < 2 {
		t.Fatalf("the reader sees no DeviceTaintRule of pool %s", node)
	}
	for what, obj := range readable {
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if s := containsAny(string(data), secrets); s != "" {
			t.Errorf("%s, as a ResourcePool reader reads it, names %q:\n%s", what, s, data)
		}
	}
	out, _, err := kubectlDRA(t, "describe", "pool", name, "--as", reader)
	if err != nil {
		t.Fatalf("kubectl dra describe pool as the reader: %v", err)
	}
	if s := containsAny(out, secrets); s != "" {
		t.Errorf("kubectl dra describe pool, as the reader, names %q:\n%s", s, out)
	}
}

// containsAny returns the first of subs that s contains, "" when none.
func containsAny(s string, subs []string) string {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}
