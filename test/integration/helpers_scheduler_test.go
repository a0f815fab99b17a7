package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/pkg/draruntime"
	"github.com/drascope/drascope/pkg/plugins/drascope"
	"github.com/drascope/drascope/pkg/plugins/drascopepreemption"
)

// startInProcessScheduler runs drascope-scheduler inside the test process
// through the same app.Setup and app.Run as the binary, with the shipped
// config. It differs from a deployment in one flag: --leader-elect=false,
// because app.Run calls os.Exit when a leader's context ends, which would end
// the test binary. Leader election with the shipped lease and RBAC is covered
// by TestSchedulerBinary, which runs bin/drascope-scheduler.
func startInProcessScheduler(ctx context.Context) (stop func(), err error) {
	port, err := localcluster.FreePort()
	if err != nil {
		return nil, err
	}
	env.schedulerStarts++
	opts := options.NewOptions()
	fs := pflag.NewFlagSet("drascope-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(append([]string{
		"--config=" + env.schedulerConfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(env.cp.Dir, "scheduler-certs"),
		// Delegated authentication and authorization of /metrics, as the
		// ServiceAccount: exercises the tokenreviews, subjectaccessreviews and
		// extension-apiserver-authentication rules of the shipped RBAC.
		"--authentication-kubeconfig=" + env.schedulerKubeconfig,
		"--authorization-kubeconfig=" + env.schedulerKubeconfig,
	}, env.cp.FeatureGateArgs()...)); err != nil {
		return nil, err
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	// Informer names are registered process-wide; a restarted scheduler gets a new one.
	if opts.InformerName, err = cache.NewInformerName(fmt.Sprintf("drascope-scheduler-%d", env.schedulerStarts)); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(ctx)
	rt := draruntime.New()
	env.runtime = rt
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(drascope.Name, drascope.Factory(rt)), app.WithPlugin(drascopepreemption.Name, drascopepreemption.New))
	if err != nil {
		cancel()
		return nil, err
	}
	errCh := make(chan error, 1)
	go func() { errCh <- app.Run(ctx, cc, sched) }()

	client := insecureClient()
	healthz := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	if err := localcluster.WaitForURL(ctx, healthz, client, "drascope-scheduler", env.schedulerLog); err != nil {
		cancel()
		return nil, err
	}
	env.schedulerPort = port
	return func() {
		cancel()
		select {
		case <-errCh:
		case <-time.After(30 * time.Second):
		}
		rt.Wait()
		// app.Run registers the config once per process; free it for a restart.
		configz.Delete("componentconfig")
	}, nil
}

// insecureClient talks to a scheduler's secure port, whose certificate is
// self-signed.
func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// schedulerBinary runs bin/drascope-scheduler with args; its output goes to
// a file in the test data directory.
type schedulerBinary struct {
	*localcluster.Process
	// port serves /healthz and /metrics (runSchedulerBinary only).
	port int
}

func startSchedulerBinary(name string, args ...string) (*schedulerBinary, error) {
	p, err := env.cp.Run(name, "drascope-scheduler", args...)
	if err != nil {
		return nil, err
	}
	return &schedulerBinary{Process: p}, nil
}

// runSchedulerBinary runs bin/drascope-scheduler with a config file as a
// Deployment's replica would: serving /healthz and /metrics on a free
// loopback port behind the ServiceAccount's delegated authentication, with
// any further args. It is stopped when the test ends (unless it exited),
// and its last lines are logged if the test failed.
func runSchedulerBinary(t *testing.T, name, config string, args ...string) (*schedulerBinary, int) {
	t.Helper()
	port, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b, err := startSchedulerBinary(name, append([]string{
		"--config=" + config,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(env.cp.Dir, name+"-certs"),
		"--authentication-kubeconfig=" + env.schedulerKubeconfig,
		"--authorization-kubeconfig=" + env.schedulerKubeconfig,
	}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	b.port = port
	t.Cleanup(func() {
		select {
		case <-b.Done():
		default:
			b.stop()
		}
		if t.Failed() {
			t.Logf("%s output (last lines):\n%s", name, tail(b.output(), 60))
		}
	})
	return b, port
}

// stop asks the scheduler to terminate, as the kubelet would, and waits.
func (b *schedulerBinary) stop() {
	b.Stop(30 * time.Second)
}

func (b *schedulerBinary) output() string {
	data, _ := os.ReadFile(b.Log)
	return string(data)
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

// writeTempConfig writes config with a clientConnection of kubeconfig and
// the further lines of clientConnection given.
func writeTempConfig(name, config, kubeconfig string, clientConnection ...string) (string, error) {
	path := env.cp.Dir + "/" + name + ".yaml"
	content := config + fmt.Sprintf("\nclientConnection:\n  kubeconfig: %s\n", kubeconfig)
	for _, line := range clientConnection {
		content += line + "\n"
	}
	return path, os.WriteFile(path, []byte(content), 0o600)
}
