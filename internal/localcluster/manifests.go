package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	drascopev1alpha1 "github.com/drascope/drascope/apis/drascope/v1alpha1"
)

// manifestCodecs decodes everything the shipped manifests hold.
var manifestCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(scheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(drascopev1alpha1.AddToScheme(s))
	return serializer.NewCodecFactory(s)
}()

// ApplyFile creates every object of a manifest file, exactly as written
// there: ServiceAccounts, RBAC objects, Validating and Mutating
// AdmissionPolicies and their bindings, and CRDs (waiting until served).
func (cp *ControlPlane) ApplyFile(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return cp.Apply(ctx, path, data)
}

// Apply is ApplyFile for manifests read already; path names them in errors.
func (cp *ControlPlane) Apply(ctx context.Context, path string, data []byte) error {
	return Apply(ctx, cp.Admin, path, data)
}

// Apply creates the objects of a manifest through any apiserver, such as the
// in-process one of scheduler_perf.
func Apply(ctx context.Context, config *rest.Config, path string, data []byte) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	objects, err := Decode(path, data)
	if err != nil {
		return err
	}
	for _, obj := range objects {
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
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, create)
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, create)
		case *admissionregistrationv1.MutatingAdmissionPolicy:
			_, err = client.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, o, create)
		case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
			_, err = client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, o, create)
		case *apiextensionsv1.CustomResourceDefinition:
			err = InstallCRD(ctx, config, o)
		default:
			return fmt.Errorf("%s: localcluster does not know how to create %T", path, obj)
		}
		if err != nil {
			return fmt.Errorf("%s: creating %T: %w", path, obj, err)
		}
	}
	return nil
}

// Decode returns the typed objects of a manifest of one or more YAML
// documents; path names it in errors.
func Decode(path string, data []byte) ([]runtime.Object, error) {
	var objects []runtime.Object
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := manifestCodecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objects = append(objects, obj)
	}
}
