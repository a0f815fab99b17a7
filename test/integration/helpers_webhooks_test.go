package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
)

// countingWebhook is an admission webhook server on loopback, with its own
// CA, that allows everything (unless told to refuse) and counts what it is
// sent.
type countingWebhook struct {
	url      string
	caBundle []byte
	mu       sync.Mutex
	calls    map[string]int // "OPERATION resource[/subresource]"
	// refuse, when set, answers a request after delay, refused with
	// message when that is not empty.
	refuse func(*admissionv1.AdmissionRequest) (delay time.Duration, message string)
}

// refuseWith makes the webhook delay or refuse the requests refuse picks.
func (w *countingWebhook) refuseWith(refuse func(*admissionv1.AdmissionRequest) (time.Duration, string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refuse = refuse
}

func startCountingWebhook(t *testing.T) *countingWebhook {
	t.Helper()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &countingWebhook{url: "https://" + listener.Addr().String() + "/validate", caBundle: certPEM, calls: map[string]int{}}
	server := &http.Server{Handler: w, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.ServeTLS(listener, "", "") }()
	t.Cleanup(func() { _ = server.Close() })
	return w
}

func (w *countingWebhook) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(rw, "want an AdmissionReview", http.StatusBadRequest)
		return
	}
	key := string(review.Request.Operation) + " " + review.Request.Resource.Resource
	if review.Request.SubResource != "" {
		key += "/" + review.Request.SubResource
	}
	w.mu.Lock()
	w.calls[key]++
	refuse := w.refuse
	w.mu.Unlock()
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if refuse != nil {
		delay, message := refuse(review.Request)
		time.Sleep(delay)
		if message != "" {
			review.Response.Allowed = false
			review.Response.Result = &metav1.Status{Message: message}
		}
	}
	review.Request = nil
	_ = json.NewEncoder(rw).Encode(&review)
}

func (w *countingWebhook) count(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[key]
}

// take returns the calls counted so far and starts counting again.
func (w *countingWebhook) take() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	calls := w.calls
	w.calls = map[string]int{}
	return calls
}

func total(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}

func describeCalls(calls map[string]int) string {
	var parts []string
	for k, n := range calls {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// addCountingWebhookConfig registers w for pods, pods/binding and
// resourceclaims/status in the scenario's namespace only (other tests share
// the apiserver), with failurePolicy Fail, and removes it when the test ends.
func (s *scenario) addCountingWebhookConfig(w *countingWebhook, name string, conditions ...admissionregistrationv1.MatchCondition) {
	s.t.Helper()
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "count.drascope.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &w.url, CABundle: w.caBundle},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.namespace}},
			MatchConditions:         conditions,
			Rules: []admissionregistrationv1.RuleWithOperations{
				{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/binding"}},
				},
				{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceclaims/status"}},
				},
			},
		}},
	}
	if _, err := env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(s.ctx, config, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating ValidatingWebhookConfiguration %s: %v", name, err)
	}
	s.t.Cleanup(func() {
		_ = env.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// probeBinding creates a pod no scheduler takes and binds it to node as
// drascope-scheduler's ServiceAccount (the exclusions of
// --scheduler-critical are its own), and reports whether the binding
// reached the webhook: the apiserver loads webhook configurations
// asynchronously, and this is how a test knows which version it uses.
func (s *scenario) probeBinding(w *countingWebhook, node string) bool {
	s.t.Helper()
	return s.probeBindingAs(w, node, asScheduler(s.t))
}

// probeBindingAs is probeBinding by another client.
func (s *scenario) probeBindingAs(w *countingWebhook, node string, client kubernetes.Interface) bool {
	s.t.Helper()
	name := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	before := w.count("CREATE pods/binding")
	s.addPlainPod(name)
	binding := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: v1.ObjectReference{Kind: "Node", Name: node}}
	if err := client.CoreV1().Pods(s.namespace).Bind(s.ctx, binding, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("binding probe pod: %v", err)
	}
	return w.count("CREATE pods/binding") > before
}

// asScheduler is a client that authenticates as drascope-scheduler's
// ServiceAccount, with the shipped RBAC.
func asScheduler(t *testing.T) kubernetes.Interface {
	t.Helper()
	config, err := clientcmd.BuildConfigFromFlags("", env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// addPlainPod creates a pod without claims that no scheduler takes.
func (s *scenario) addPlainPod(name string) {
	s.t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.PodSpec{SchedulerName: "nobody", Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := env.client.CoreV1().Pods(s.namespace).Create(s.ctx, pod, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating pod %s/%s: %v", s.namespace, name, err)
	}
}

// waitForWebhookConfig probes until a binding reaches the webhook (want
// true) or no longer does (want false).
func (s *scenario) waitForWebhookConfig(w *countingWebhook, node string, want bool) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return s.probeBinding(w, node) == want, nil
	})
	if err != nil {
		s.t.Fatalf("the apiserver did not load the webhook configuration (bindings reach the webhook: want %v)", want)
	}
}
