package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// applyManifest creates every object of a shipped manifest file, exactly as
// written there.
func applyManifest(ctx context.Context, client kubernetes.Interface, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		create := metav1.CreateOptions{}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, create)
		case *rbacv1.ClusterRole:
			_, err = client.RbacV1().ClusterRoles().Create(ctx, o, create)
		case *rbacv1.ClusterRoleBinding:
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, create)
		case *rbacv1.Role:
			_, err = client.RbacV1().Roles(o.Namespace).Create(ctx, o, create)
		case *rbacv1.RoleBinding:
			_, err = client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, create)
		default:
			return fmt.Errorf("%s: the test harness does not know how to create %T", path, obj)
		}
		if err != nil {
			return fmt.Errorf("%s: creating %T: %w", path, obj, err)
		}
	}
}

// schedulerConfigWithKubeconfig writes a copy of a KubeSchedulerConfiguration
// file that differs only in clientConnection.kubeconfig (the shipped config
// relies on the in-cluster config of its Deployment).
func schedulerConfigWithKubeconfig(src, name, kubeconfig string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	return writeTempConfig(name, string(data), kubeconfig)
}

func writeTempConfig(name, config, kubeconfig string) (string, error) {
	path := env.cp.dir + "/" + name + ".yaml"
	content := config + fmt.Sprintf("\nclientConnection:\n  kubeconfig: %s\n", kubeconfig)
	return path, os.WriteFile(path, []byte(content), 0o600)
}
