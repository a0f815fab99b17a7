package integration

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// controlPlane is a real etcd and a real kube-apiserver, both binaries built by
// the Makefile from the versions go.mod pins, listening on loopback only.
type controlPlane struct {
	dir       string
	binDir    string
	processes []*process
	host      string
	caFile    string
	etcdURL   string
	// admin authenticates as a member of system:masters.
	admin *rest.Config
}

const adminToken = "drascope-integration-admin"

func binPath(binDir, name string) (string, error) {
	path := filepath.Join(binDir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found in %s (DRASCOPE_BIN_DIR); run the tests through `make test`, which builds it: %w", name, binDir, err)
	}
	return path, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a running binary; done closes when it exits.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// start runs a binary with its output in dir/<name>.log.
func (cp *controlPlane) start(name string, args ...string) error {
	path, err := binPath(cp.binDir, name)
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	cp.processes = append(cp.processes, p)
	return nil
}

func startControlPlane(ctx context.Context, binDir string) (*controlPlane, error) {
	dir, err := os.MkdirTemp("", "drascope-integration-")
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{dir: dir, binDir: binDir}
	if err := cp.startEtcd(ctx); err != nil {
		cp.stop()
		return nil, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

func (cp *controlPlane) startEtcd(ctx context.Context) error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if err := cp.start("etcd",
		"--name=drascope",
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=drascope="+peer,
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return err
	}
	cp.etcdURL = client
	return waitForURL(ctx, client+"/health", nil, "etcd", cp.logPath("etcd"))
}

func (cp *controlPlane) startAPIServer(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	keyFile := filepath.Join(cp.dir, "sa.key")
	if err := writeRSAKey(keyFile); err != nil {
		return err
	}
	tokenFile := filepath.Join(cp.dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	certDir := filepath.Join(cp.dir, "apiserver-certs")
	if err := cp.start("kube-apiserver",
		"--etcd-servers="+cp.etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		// Required when advertising loopback; there is no Service endpoint to keep.
		"--endpoint-reconciler-type=none",
		"--secure-port="+strconv.Itoa(port), "--cert-dir="+certDir,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--token-auth-file="+tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+keyFile, "--service-account-signing-key-file="+keyFile,
		// Without a node lifecycle controller the not-ready taint it adds never goes away.
		"--disable-admission-plugins=TaintNodesByCondition",
	); err != nil {
		return err
	}
	cp.host = fmt.Sprintf("https://127.0.0.1:%d", port)
	cp.caFile = filepath.Join(certDir, "apiserver.crt")
	cp.admin = &rest.Config{
		Host:            cp.host,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.caFile},
		QPS:             100,
		Burst:           200,
	}
	// The certificate file appears once the apiserver starts serving.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(cp.caFile)
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver wrote no serving certificate: %w; see %s", err, cp.logPath("kube-apiserver"))
	}
	client, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cp.exited(); err != nil {
			return false, err
		}
		status := 0
		client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		return status == http.StatusOK, nil
	})
}

func (cp *controlPlane) logPath(name string) string {
	return filepath.Join(cp.dir, name+".log")
}

// exited reports a control-plane process that has died.
func (cp *controlPlane) exited() error {
	for _, p := range cp.processes {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); see %s", p.name, p.err, cp.logPath(p.name))
		default:
		}
	}
	return nil
}

func (cp *controlPlane) stop() {
	for i := len(cp.processes) - 1; i >= 0; i-- {
		p := cp.processes[i]
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if os.Getenv("DRASCOPE_KEEP_TEST_DATA") == "" {
		_ = os.RemoveAll(cp.dir)
	}
}

// kubeconfig writes a kubeconfig for this apiserver with the given bearer token.
func (cp *controlPlane) kubeconfig(name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["integration"] = &clientcmdapi.Cluster{Server: cp.host, CertificateAuthority: cp.caFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "integration", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(cp.dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

func waitForURL(ctx context.Context, url string, client *http.Client, what, logPath string) error {
	if client == nil {
		client = http.DefaultClient
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not become healthy at %s: %w; see %s", what, url, err, logPath)
	}
	return nil
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}
