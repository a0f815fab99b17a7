package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// KEP-5677's second user story: someone who is not a cluster-admin reads
// ResourcePools. manifests/crds/resourcepool-reader.yaml aggregates read
// access into view (and edit, admin): a user bound to view cluster-wide
// lists them. A RoleBinding to view in a namespace does not reach a
// cluster-scoped kind; binding the reader role to the user's group does.
func TestResourcePoolsReadableByViewers(t *testing.T) {
	s := newScenario(t, nil)
	ctx := s.ctx
	rbac := env.client.RbacV1()

	viewer := "viewer-" + s.namespace
	s.bindCluster("view", rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: viewer})
	waitForAccess(t, ctx, viewer, nil)

	developer := "developer-" + s.namespace
	if _, err := rbac.RoleBindings(s.namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "developer-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: developer}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := listResourcePoolsAs(ctx, developer, nil); !apierrors.IsForbidden(err) {
		t.Errorf("a user with view in one namespace listed ResourcePools (err %v): RBAC changed, update docs/resourcepools.md", err)
	}
	group := "developers-" + s.namespace
	s.bindCluster("drascope:resourcepool-reader", rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group})
	waitForAccess(t, ctx, developer, []string{group})
}

// bindCluster binds a ClusterRole cluster-wide to subject, until the test ends.
func (s *scenario) bindCluster(role string, subject rbacv1.Subject) {
	s.t.Helper()
	name := fmt.Sprintf("%s-%s", s.namespace, subject.Name)
	if _, err := env.client.RbacV1().ClusterRoleBindings().Create(s.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		_ = env.client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// listResourcePoolsAs lists ResourcePools impersonating user in groups.
func listResourcePoolsAs(ctx context.Context, user string, groups []string) error {
	client, err := versioned.NewForConfig(impersonating(user, groups...))
	if err != nil {
		return err
	}
	_, err = client.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{Limit: 1})
	return err
}

// waitForAccess waits until the user may list ResourcePools: aggregation
// takes a moment.
func waitForAccess(t *testing.T, ctx context.Context, user string, groups []string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		err := listResourcePoolsAs(ctx, user, groups)
		if err != nil && ctx.Err() == nil {
			last = err
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("user %s (groups %v) may not list ResourcePools: %v", user, groups, last)
	}
}

// impersonating is the admin's client config acting as user, authenticated,
// in groups; JSON, which ResourcePools (a custom resource) speak.
func impersonating(user string, groups ...string) *rest.Config {
	config := rest.CopyConfig(env.cp.Admin)
	config.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	config.ContentType = "application/json"
	return config
}
