// Package localcluster runs a Kubernetes control plane on loopback from the
// binaries the Makefile builds into bin/: etcd, kube-apiserver and, when
// asked, kube-controller-manager, each a supervised child process with its
// output in a log file. The integration tests and drascope-sandbox use it.
package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// Options configure a control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver and kube-controller-manager.
	BinDir string
	// Dir is where data and logs go; a new temporary directory when empty.
	Dir string
	// APIServerPort is the apiserver's secure port; a free one when 0.
	APIServerPort int
	// AdminToken authenticates as a member of system:masters.
	AdminToken string
	// FeatureGates are passed to kube-apiserver and kube-controller-manager
	// (--feature-gates), for gates beyond the version's defaults.
	FeatureGates map[string]bool
	// RuntimeConfig enables API versions off by default
	// (--runtime-config), for example scheduling.k8s.io/v1beta1=true.
	RuntimeConfig []string
	// AuditPolicy, when set, is an audit policy (audit.k8s.io/v1 Policy,
	// YAML): kube-apiserver logs the requests it selects, one JSON event a
	// line, to ControlPlane.AuditLog, synchronously, so a request's event
	// is in the file once its response is.
	AuditPolicy string
}

// WorkloadGates turn on upstream's workload-aware scheduling (the PodGroup
// API, gang scheduling) and ResourceClaims for a whole PodGroup, both beta
// and off by default in 1.37; WorkloadAPI serves the PodGroup API version,
// also off by default. Pass both in Options, and the gates to every
// scheduler too (FeatureGateArgs).
var (
	WorkloadGates = map[string]bool{"GenericWorkload": true, "DRAWorkloadResourceClaims": true}
	WorkloadAPI   = "scheduling.k8s.io/v1beta1=true"
)

// ControlPlane is a running etcd and kube-apiserver, and whatever else was
// started through it.
type ControlPlane struct {
	Dir     string
	BinDir  string
	Host    string
	CAFile  string
	EtcdURL string
	// Admin authenticates with Options.AdminToken.
	Admin      *rest.Config
	adminToken string
	saKeyFile  string
	// featureGates and runtimeConfig are the Options' flags, kept for a
	// restarted apiserver and for the controller manager.
	featureGates  []string
	runtimeConfig []string
	// AuditLog is kube-apiserver's audit log (Options.AuditPolicy); empty
	// without a policy. A restarted apiserver appends to it.
	AuditLog  string
	auditArgs []string

	mu        sync.Mutex
	processes []*Process
}

// Process is a running binary; Done closes when it exits, and Err then says
// how.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// stopped is set by Stop and Kill: an exit asked for is no failure.
	stopped atomic.Bool
}

// Done closes when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process exited, once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop interrupts the process and waits for it to exit, killing it after
// grace.
func (p *Process) Stop(grace time.Duration) {
	p.stopped.Store(true)
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process at once (SIGKILL), as a crash or an OOM kill would:
// nothing it holds is released, and waits for it to exit.
func (p *Process) Kill() {
	p.stopped.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// BinPath finds a binary the Makefile builds.
func BinPath(binDir, name string) (string, error) {
	path := filepath.Join(binDir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s not found in %s; `make build tools` builds it: %w", name, binDir, err)
	}
	return path, nil
}

// FreePort returns a TCP port on loopback that nothing listens on now,
// below the kernel's range of ephemeral ports. A port from that range,
// which listening on port 0 gives, can be taken by an outgoing connection
// between this check and the server's own bind (seen: etcd's "bind:
// address already in use" while a busy kube-apiserver opened
// connections); a port below it is only ever taken by a listener. Ports
// are handed out once per process.
func FreePort() (int, error) {
	freePorts.Lock()
	defer freePorts.Unlock()
	if low := ephemeralLow(); low-firstPort >= 1000 {
		for range 100 {
			port := firstPort + mathrand.IntN(low-firstPort)
			if freePorts.given.Has(port) {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			_ = l.Close()
			freePorts.given.Insert(port)
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// firstPort is the lowest port FreePort hands out: above the well-known
// and most registered services' ports.
const firstPort = 10000

var freePorts = struct {
	sync.Mutex
	given sets.Set[int]
}{given: sets.New[int]()}

// ephemeralLow is the first port of the kernel's ephemeral range, or
// Linux's default first port where it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return low
}

// Start runs etcd and kube-apiserver (RBAC authorization, the admin token,
// service account tokens) and waits until the apiserver is ready.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	dir := opts.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "drascope-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, BinDir: opts.BinDir, adminToken: opts.AdminToken,
		featureGates: featureGateFlags(opts.FeatureGates), runtimeConfig: runtimeConfigFlags(opts.RuntimeConfig)}
	if opts.AuditPolicy != "" {
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(opts.AuditPolicy), 0o600); err != nil {
			return nil, err
		}
		cp.AuditLog = filepath.Join(dir, "audit.log")
		cp.auditArgs = []string{"--audit-policy-file=" + policy, "--audit-log-path=" + cp.AuditLog,
			"--audit-log-format=json", "--audit-log-mode=blocking"}
	}
	if err := cp.startEtcd(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.startAPIServer(ctx, opts.APIServerPort); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// Run starts a binary of BinDir with its output in Dir/<name>.log. Stop
// stops it, in reverse order of starting.
func (cp *ControlPlane) Run(name, binary string, args ...string) (*Process, error) {
	path, err := BinPath(cp.BinDir, binary)
	if err != nil {
		return nil, err
	}
	logPath := cp.LogPath(name)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	cp.mu.Lock()
	cp.processes = append(cp.processes, p)
	cp.mu.Unlock()
	return p, nil
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if _, err := cp.Run("etcd", "etcd",
		"--name=drascope",
		"--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=drascope="+peer,
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return err
	}
	cp.EtcdURL = client
	return WaitForURL(ctx, client+"/health", nil, "etcd", cp.LogPath("etcd"))
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, port int) error {
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return err
		}
	}
	// A restarted apiserver keeps the key, so that tokens issued before
	// stay valid, and its serving certificate (kept in cert-dir).
	cp.saKeyFile = filepath.Join(cp.Dir, "sa.key")
	if _, err := os.Stat(cp.saKeyFile); err != nil {
		if err := writeRSAKey(cp.saKeyFile); err != nil {
			return err
		}
	}
	tokenFile := filepath.Join(cp.Dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(cp.adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	certDir := filepath.Join(cp.Dir, "apiserver-certs")
	apiserver, err := cp.Run("kube-apiserver", "kube-apiserver", append([]string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		// Required when advertising loopback; there is no Service endpoint to keep.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(port), "--cert-dir=" + certDir,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + cp.saKeyFile, "--service-account-signing-key-file=" + cp.saKeyFile,
		// Without a node lifecycle controller the not-ready taint it adds never goes away.
		"--disable-admission-plugins=TaintNodesByCondition",
	}, slices.Concat(cp.featureGates, cp.runtimeConfig, cp.auditArgs)...)...,
	)
	if err != nil {
		return err
	}
	cp.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	cp.CAFile = filepath.Join(certDir, "apiserver.crt")
	cp.Admin = &rest.Config{
		Host:            cp.Host,
		BearerToken:     cp.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cp.CAFile},
		QPS:             100,
		Burst:           200,
	}
	// The certificate file appears once the apiserver starts serving.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(cp.CAFile)
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver wrote no serving certificate: %w%s", err, seeLog(apiserver.Log))
	}
	client, err := readyzClient(cp.Admin)
	if err != nil {
		return err
	}
	return waitReady(ctx, client, apiserver, 2*time.Minute, clock.RealClock{})
}

// readyzRequestTimeout bounds one /readyz request (a variable for the test).
var readyzRequestTimeout = 10 * time.Second

// readyzInterval is the pause between two /readyz requests.
const readyzInterval = 200 * time.Millisecond

// readyzClient asks /readyz without a client-side rate limiter: the default
// limiter refuses to wait near the end of the wait ("rate: Wait(n=1) would
// exceed context deadline"), and that refusal would replace the server's
// last answer, which is what a person needs to read.
func readyzClient(config *rest.Config) (rest.Interface, error) {
	config = rest.CopyConfig(config)
	config.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return client.Discovery().RESTClient(), nil
}

// waitReady polls /readyz until it answers 200, for timeout as clk counts
// it. Each request has its own deadline, so that one the starting server
// accepts but never answers cannot use up the whole wait. When the wait
// ends, the error says what the server last answered (the last client error
// only when it never answered) and ends with the log's last lines, since
// the sandbox removes the directory they are in.
func waitReady(ctx context.Context, client rest.Interface, apiserver *Process, timeout time.Duration, clk clock.Clock) error {
	deadline := clk.Now().Add(timeout)
	answer, lastErr := "", "no answer yet"
	for {
		select {
		case <-apiserver.Done():
			return fmt.Errorf("kube-apiserver exited (%v)%s", apiserver.Err(), seeLog(apiserver.Log))
		default:
		}
		requestCtx, cancel := context.WithTimeout(ctx, readyzRequestTimeout)
		status := 0
		body, err := client.Get().AbsPath("/readyz").Param("verbose", "true").Do(requestCtx).StatusCode(&status).Raw()
		cancel()
		switch {
		case status == http.StatusOK:
			return nil
		case status != 0:
			answer = fmt.Sprintf("HTTP %d: %s", status, failedChecks(body))
		case err != nil:
			lastErr = err.Error()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !clk.Now().Before(deadline) {
			last := answer
			if last == "" {
				last = lastErr
			}
			return fmt.Errorf("kube-apiserver was not ready within %s (last /readyz: %s)%s", timeout, last, seeLog(apiserver.Log))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-apiserver.Done():
		case <-clk.After(readyzInterval):
		}
	}
}

// failedChecks keeps the lines of a verbose /readyz answer that name a
// failing check.
func failedChecks(body []byte) string {
	var failed []string
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, strings.TrimSpace(line))
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(failed, "; ")
}

// seeLog ends an error about a process: where its log is, and the log's
// last lines, indented (none when it cannot be read).
func seeLog(path string) string {
	see := "; see " + path
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return see
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-20):]
	return fmt.Sprintf("%s\nits last %d lines:\n  %s", see, len(lines), strings.Join(lines, "\n  "))
}

// RestartAPIServer kills kube-apiserver (SIGKILL, as a crash would), waits
// down, and starts it again on the same port with the same certificates,
// keys and etcd data; it returns once the new one is ready.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, down time.Duration) error {
	cp.mu.Lock()
	var old *Process
	index := 0
	for i, p := range cp.processes {
		if p.Name == "kube-apiserver" {
			old, index = p, i
			cp.processes = slices.Delete(cp.processes, i, i+1)
			break
		}
	}
	cp.mu.Unlock()
	if old == nil {
		return fmt.Errorf("no kube-apiserver is running")
	}
	_, portText, err := net.SplitHostPort(strings.TrimPrefix(cp.Host, "https://"))
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return err
	}
	old.Kill()
	if err := os.Rename(old.Log, old.Log+"."+time.Now().Format("150405")); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	err = cp.startAPIServer(ctx, port)
	// Back in its place, so that Stop still stops what depends on it first.
	cp.mu.Lock()
	if last := len(cp.processes) - 1; last >= index && cp.processes[last].Name == "kube-apiserver" {
		restarted := cp.processes[last]
		cp.processes = slices.Insert(slices.Delete(cp.processes, last, last+1), index, restarted)
	}
	cp.mu.Unlock()
	return err
}

// StartControllerManager runs kube-controller-manager as the admin with only
// the named controllers (for example resourceclaim-controller), and waits
// until it is healthy.
func (cp *ControlPlane) StartControllerManager(ctx context.Context, controllers ...string) error {
	kubeconfig, err := cp.Kubeconfig("admin", cp.adminToken)
	if err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	if _, err := cp.Run("kube-controller-manager", "kube-controller-manager", append([]string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-controller-manager-certs"),
		"--service-account-private-key-file=" + cp.saKeyFile,
		"--root-ca-file=" + cp.CAFile,
	}, cp.featureGates...)...,
	); err != nil {
		return err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	return WaitForURL(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecure, "kube-controller-manager", cp.LogPath("kube-controller-manager"))
}

// FeatureGateArgs are the control plane's --feature-gates, for a
// component started beside it (a scheduler) to run with the same gates.
func (cp *ControlPlane) FeatureGateArgs() []string {
	return slices.Clone(cp.featureGates)
}

// featureGateFlags renders gates as one --feature-gates flag, sorted so
// that a log shows the same line each run; none when gates is empty.
func featureGateFlags(gates map[string]bool) []string {
	if len(gates) == 0 {
		return nil
	}
	var pairs []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		pairs = append(pairs, fmt.Sprintf("%s=%t", name, gates[name]))
	}
	return []string{"--feature-gates=" + strings.Join(pairs, ",")}
}

func runtimeConfigFlags(config []string) []string {
	if len(config) == 0 {
		return nil
	}
	return []string{"--runtime-config=" + strings.Join(config, ",")}
}

// LogPath is where a process's output goes.
func (cp *ControlPlane) LogPath(name string) string {
	return filepath.Join(cp.Dir, name+".log")
}

// Exited reports a process that has died without being stopped.
func (cp *ControlPlane) Exited() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, p := range cp.processes {
		if p.stopped.Load() {
			continue
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); see %s", p.Name, p.err, p.Log)
		default:
		}
	}
	return nil
}

// Stop interrupts every process in reverse order of starting, killing any
// that has not exited after 10 seconds. It leaves Dir in place.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	processes := cp.processes
	cp.processes = nil
	cp.mu.Unlock()
	for i := len(processes) - 1; i >= 0; i-- {
		processes[i].Stop(10 * time.Second)
	}
}

// Kubeconfig writes a kubeconfig for this apiserver with the given bearer
// token to Dir/<name>.kubeconfig.
func (cp *ControlPlane) Kubeconfig(name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["drascope"] = &clientcmdapi.Cluster{Server: cp.Host, CertificateAuthority: cp.CAFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "drascope", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// InstallCRD creates a CRD and waits until it is served.
func (cp *ControlPlane) InstallCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	return InstallCRD(ctx, cp.Admin, crd)
}

// InstallCRD creates a CRD through any apiserver and waits until it is served.
func InstallCRD(ctx context.Context, config *rest.Config, crd *apiextensionsv1.CustomResourceDefinition) error {
	client, err := apiextensionsclient.NewForConfig(config)
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

// WaitForURL waits until url answers 200.
func WaitForURL(ctx context.Context, url string, client *http.Client, what, logPath string) error {
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
		return fmt.Errorf("%s did not become healthy at %s: %w%s", what, url, err, seeLog(logPath))
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

// insecureTLS is for health checks of components that serve self-signed
// certificates on loopback.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // loopback health check
