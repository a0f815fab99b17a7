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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"time"
)

// manifestCodecs decodes everything the shipped manifests hold.
var manifestCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// installCRD creates a CRD and waits until it is served.
func installCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	client, err := apiextensionsclient.NewForConfig(env.cp.admin)
	if err != nil {
		return err
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

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
		obj, _, err := manifestCodecs.UniversalDeserializer().Decode(doc, nil, nil)
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
		case *apiextensionsv1.CustomResourceDefinition:
			err = installCRD(ctx, o)
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
