// Package sandbox runs the whole product on a local control plane: etcd,
// kube-apiserver and kube-controller-manager (k8s.io/kubernetes v1.37.2, as
// drascope links), drascope-scheduler with the shipped config and CRD,
// nodes simulated by KWOK and a simulated DRA driver; then a demo, and it
// stays up for a person to explore.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	"crypto/tls"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/drascope/drascope/internal/localcluster"
	"github.com/drascope/drascope/manifests"
	"github.com/drascope/drascope/pkg/generated/clientset/versioned"
)

// Options configure the sandbox.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// drascope-scheduler, kwok and kwok-stages.yaml.
	BinDir string
	// Nodes and DevicesPerNode size the simulated cluster.
	Nodes, DevicesPerNode int
	// Demo runs the demo; ExitAfterDemo then stops instead of staying up.
	Demo, ExitAfterDemo bool
	// Port is the apiserver's port on 127.0.0.1; a free one when 0.
	Port int
	// KeepData keeps the data directory (etcd, logs, kubeconfig).
	KeepData bool
	// Out receives what a person reads.
	Out io.Writer
}

// controllers are those of kube-controller-manager the sandbox needs:
// default ServiceAccounts, claims from templates, DaemonSets, and garbage
// collection of what a deleted owner leaves.
var controllers = []string{"serviceaccount-controller", "resourceclaim-controller", "daemonset-controller", "garbage-collector-controller"}

// Run starts everything, runs the demo if asked, and then stays up until
// ctx ends or a process dies; it stops every process it started before it
// returns.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Nodes < 3 {
		return fmt.Errorf("--nodes must be at least 3 (the demo fills one node, half fills another, and shows one empty); got %d", opts.Nodes)
	}
	if opts.DevicesPerNode < 4 {
		return fmt.Errorf("--devices-per-node must be at least 4; got %d", opts.DevicesPerNode)
	}
	out := opts.Out
	start := time.Now()
	logger := klog.FromContext(ctx)
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	adminToken := hex.EncodeToString(token)

	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("Starting etcd and kube-apiserver (k8s.io/kubernetes %s) on 127.0.0.1 ...", kubernetesModuleVersion())
	// Workload-aware scheduling (gangs, step 9) is beta and off by default
	// in 1.37: the sandbox turns it on in every component.
	cp, err := localcluster.Start(ctx, localcluster.Options{
		BinDir: opts.BinDir, APIServerPort: opts.Port, AdminToken: adminToken,
		FeatureGates: localcluster.WorkloadGates, RuntimeConfig: []string{localcluster.WorkloadAPI},
	})
	if err != nil {
		return err
	}
	defer func() {
		say("Stopping ...")
		cp.Stop()
		if opts.KeepData {
			say("Data and logs kept in %s", cp.Dir)
		} else if rmErr := os.RemoveAll(cp.Dir); rmErr != nil && err == nil {
			err = rmErr
		}
	}()
	say("Data and logs: %s", cp.Dir)
	kubeconfig, err := cp.Kubeconfig("admin", adminToken)
	if err != nil {
		return err
	}
	// The PodGroup API's deprecation warning (v1beta1 goes in 1.43) would
	// interleave with the demo's transcript; kubectl still shows it.
	quiet := rest.CopyConfig(cp.Admin)
	quiet.WarningHandler = rest.NoWarnings{}
	client, err := kubernetes.NewForConfig(quiet)
	if err != nil {
		return err
	}
	pools, err := versioned.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}

	say("Starting kube-controller-manager (%d controllers) ...", len(controllers))
	if err := cp.StartControllerManager(ctx, controllers...); err != nil {
		return err
	}
	for _, name := range []string{"resourcepools.drascope.dev.yaml", "devicequotas.drascope.dev.yaml"} {
		crd, err := manifests.Files.ReadFile("crds/" + name)
		if err != nil {
			return err
		}
		if err := cp.Apply(ctx, "manifests/crds/"+name, crd); err != nil {
			return err
		}
	}
	say("Starting drascope-scheduler with manifests/scheduler/config.yaml ...")
	schedulerPort, err := startScheduler(ctx, cp, kubeconfig)
	if err != nil {
		return err
	}

	nodes := make([]string, opts.Nodes)
	for i := range nodes {
		nodes[i] = "node-" + strconv.Itoa(i+1)
	}
	say("Starting KWOK with %d nodes, and a simulated DRA driver: per node %d GPUs and %d partitionable GPUs (driver %s), and a network-attached pool (driver %s) ...",
		opts.Nodes, opts.DevicesPerNode, partitionableGPUs, gpuDriver, fabricDriver)
	if err := startNodes(ctx, cp, client, kubeconfig, nodes); err != nil {
		return err
	}
	kubelet, err := startSimulatedKubelet(ctx, client, nodes)
	if err != nil {
		return err
	}
	if err := startDriver(ctx, client, nodes, opts.DevicesPerNode); err != nil {
		return err
	}
	if err := waitForPools(ctx, pools, opts.Nodes+1); err != nil {
		return err
	}
	say("\nThe sandbox is up after %s. In another shell:\n  export KUBECONFIG=%s\n  kubectl dra pools", time.Since(start).Round(100*time.Millisecond), kubeconfig)

	if opts.Demo {
		d := &demo{out: out, client: client, pools: pools, kubeconfig: kubeconfig, kubelet: kubelet, nodes: nodes, gpus: opts.DevicesPerNode,
			binDir: opts.BinDir, schedulerPort: schedulerPort, adminToken: adminToken}
		if err := d.run(ctx); err != nil {
			return err
		}
		say("\nThe demo passed every step.")
	}
	if opts.ExitAfterDemo {
		return nil
	}
	say("\nExplore with kubectl and kubectl dra (KUBECONFIG=%s). Ctrl-C stops everything.", kubeconfig)
	for {
		select {
		case <-ctx.Done():
			logger.V(2).Info("Stopping on request")
			return nil
		case <-time.After(time.Second):
			if err := cp.Exited(); err != nil {
				return err
			}
		}
	}
}

// startScheduler runs bin/drascope-scheduler with the shipped config and
// the control plane's feature gates; only the kubeconfig is added (a
// Deployment uses its in-cluster config). It
// returns the port of its /metrics.
func startScheduler(ctx context.Context, cp *localcluster.ControlPlane, kubeconfig string) (port int, err error) {
	shipped, err := manifests.Files.ReadFile("scheduler/config.yaml")
	if err != nil {
		return 0, err
	}
	config := filepath.Join(cp.Dir, "drascope-scheduler.yaml")
	content := string(shipped) + fmt.Sprintf("\nclientConnection:\n  kubeconfig: %s\n", kubeconfig)
	if err := os.WriteFile(config, []byte(content), 0o600); err != nil {
		return 0, err
	}
	port, err = localcluster.FreePort()
	if err != nil {
		return 0, err
	}
	p, err := cp.Run("drascope-scheduler", "drascope-scheduler", append([]string{
		"--config=" + config,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "drascope-scheduler-certs"),
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
	}, cp.FeatureGateArgs()...)...,
	)
	if err != nil {
		return 0, err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health check
	return port, localcluster.WaitForURL(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecure, "drascope-scheduler", p.Log)
}

// waitForPools waits until the scheduler publishes a ResourcePool for every
// pool the driver publishes.
func waitForPools(ctx context.Context, pools versioned.Interface, want int) error {
	got := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pools.DrascopeV1alpha1().ResourcePools().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		got = len(list.Items)
		return got >= want, nil
	})
	if err != nil {
		return fmt.Errorf("drascope-scheduler published %d of %d ResourcePools", got, want)
	}
	return nil
}

// kubernetesModuleVersion is the k8s.io/kubernetes version this binary was
// built with, which is the version make tools builds the control plane from.
func kubernetesModuleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/kubernetes" {
				return dep.Version
			}
		}
	}
	return "of go.mod"
}
