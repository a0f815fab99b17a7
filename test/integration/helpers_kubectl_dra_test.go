package integration

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/drascope/drascope/pkg/kubectldra"
)

// kubectlDRA runs `kubectl dra` in-process as the cluster admin (or as
// another user with --as) and returns stdout and stderr.
func kubectlDRA(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	kubeconfig, err := env.cp.Kubeconfig("admin", adminToken)
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

// grantClusterRead lets user get and list the given resources, for the test.
func grantClusterRead(t *testing.T, s *scenario, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	if _, err := env.client.RbacV1().ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules,
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
		_ = env.client.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
		_ = env.client.RbacV1().ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
}

// findLine returns the first output line whose fields start with prefix.
func findLine(out string, prefix ...string) []string {
	for _, row := range rows(out) {
		if len(row) >= len(prefix) && strings.Join(row[:len(prefix)], " ") == strings.Join(prefix, " ") {
			return row
		}
	}
	return nil
}

// syncBuffer is a bytes.Buffer that a running command writes while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startKubectlDRA runs `kubectl dra` in-process as the cluster admin until
// stop is called (or the test ends), for commands that run until stopped;
// stop returns the command's error.
func startKubectlDRA(t *testing.T, args ...string) (out *syncBuffer, stop func() error) {
	t.Helper()
	kubeconfig, err := env.cp.Kubeconfig("admin", adminToken)
	if err != nil {
		t.Fatal(err)
	}
	out = &syncBuffer{}
	cmd := kubectldra.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: out, ErrOut: &syncBuffer{}})
	cmd.SetArgs(append([]string{"--kubeconfig=" + kubeconfig}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			result = <-done
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return out, stop
}
