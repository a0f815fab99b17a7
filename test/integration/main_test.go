// Package integration runs drascope-scheduler against a real kube-apiserver
// and etcd (binaries built by the Makefile), with the resourceclaim controller
// of kube-controller-manager in-process so claim templates become claims.
//
// One control plane and one in-process scheduler serve every scenario; the
// scenarios run one after another, each in its own namespace with its own
// nodes and pools, so they do not interfere. Run through `make test`.
package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/draruntime"
)

// env is the shared test environment, set up by TestMain.
var env struct {
	cp     *controlPlane
	client kubernetes.Interface
	// schedulerKubeconfig authenticates as the drascope-scheduler
	// ServiceAccount with a token from the TokenRequest API, so every call
	// the scheduler makes is authorized by the RBAC in manifests/ alone.
	schedulerKubeconfig string
	// schedulerConfig is manifests/scheduler/config.yaml plus
	// clientConnection.kubeconfig = schedulerKubeconfig.
	schedulerConfig string
	// schedulerLog is where the in-process scheduler's klog output goes.
	schedulerLog string
	// schedulerPort serves the in-process scheduler's /healthz and /metrics.
	schedulerPort int
	// schedulerStarts counts in-process starts (a test restarts it).
	schedulerStarts int
	// stopScheduler stops the in-process scheduler.
	stopScheduler func()
	// runtime is the in-process scheduler's DRAScope runtime, whose
	// long-lived state the churn soak measures.
	runtime *draruntime.Runtime
}

const (
	repoRoot           = "../.."
	manifestsDir       = repoRoot + "/manifests/scheduler"
	crdsDir            = repoRoot + "/manifests/crds"
	driverName         = "gpu.example.com"
	deviceClassName    = "gpu.example.com"
	schedulerName      = "drascope-scheduler"
	schedulerNamespace = "kube-system"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "integration test set-up failed: %v\n", err)
		if env.cp != nil {
			env.cp.stop()
		}
		return 1
	}
	defer env.cp.stop()
	stop, err := startInProcessScheduler(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting drascope-scheduler in-process: %v\n(scheduler log: %s)\n", err, env.schedulerLog)
		return 1
	}
	env.stopScheduler = stop
	code := m.Run()
	if env.stopScheduler != nil {
		env.stopScheduler()
	}
	// Every write the scenarios made the scheduler send must be one
	// pkg/webhooks knows (kubectl dra webhooks audit and exclude).
	report, err := checkSchedulerWrites(ctx)
	fmt.Fprintf(os.Stderr, "drascope-scheduler's writes in this run, from the apiserver's audit log:\n%s", report)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs: %s (set DRASCOPE_KEEP_TEST_DATA=1 to keep them)\n", env.cp.Dir)
	}
	return code
}

func setUp(ctx context.Context) error {
	binDir := os.Getenv("DRASCOPE_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join(repoRoot, "bin")
	}
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	cp, err := startControlPlane(ctx, binDir)
	if err != nil {
		return err
	}
	env.cp = cp
	env.client, err = kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	env.schedulerLog = filepath.Join(cp.Dir, "drascope-scheduler.log")
	if err := redirectKlog(env.schedulerLog); err != nil {
		return err
	}

	for _, file := range []string{
		filepath.Join(crdsDir, "resourcepools.drascope.dev.yaml"),
		filepath.Join(crdsDir, "resourcepool-reader.yaml"),
		filepath.Join(crdsDir, "devicequotas.drascope.dev.yaml"),
		filepath.Join(crdsDir, "devicequota-reader.yaml"),
		filepath.Join(manifestsDir, "serviceaccount.yaml"),
		filepath.Join(manifestsDir, "rbac.yaml"),
		filepath.Join(manifestsDir, "device-taint-rule-policy.yaml"),
	} {
		if err := env.cp.ApplyFile(ctx, file); err != nil {
			return err
		}
	}
	token, err := env.client.CoreV1().ServiceAccounts(schedulerNamespace).CreateToken(ctx, schedulerName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)}},
		metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", schedulerNamespace, schedulerName, err)
	}
	env.schedulerKubeconfig, err = cp.Kubeconfig(schedulerName, token.Status.Token)
	if err != nil {
		return err
	}
	env.schedulerConfig, err = schedulerConfigWithKubeconfig(filepath.Join(manifestsDir, "config.yaml"), "config", env.schedulerKubeconfig)
	if err != nil {
		return err
	}

	if _, err := env.client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: deviceClassName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driverName)},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The claim controller reads its gates once, when it is built; the
	// scheduler sets the same gates again from its flags.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(workloadGates); err != nil {
		return fmt.Errorf("turning on %v in-process: %w", workloadGates, err)
	}
	if err := startResourceClaimController(ctx, env.client); err != nil {
		return err
	}
	startClusterRoleAggregation(ctx, env.client)
	return nil
}

// startClusterRoleAggregation runs kube-controller-manager's
// clusterrole-aggregation controller, which folds roles labelled
// aggregate-to-view (and edit, admin) into the built-in ones.
func startClusterRoleAggregation(ctx context.Context, client kubernetes.Interface) {
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), client.RbacV1())
	factory.Start(ctx.Done())
	go ctrl.Run(ctx, 1)
}

// redirectKlog sends klog output (the in-process scheduler's and the claim
// controller's) to a file, so test output stays readable.
func redirectKlog(path string) error {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	v := os.Getenv("DRASCOPE_TEST_V")
	if v == "" {
		v = "3"
	}
	for name, value := range map[string]string{
		"logtostderr": "false", "alsologtostderr": "false", "log_file": path,
		"one_output": "true", "v": v,
	} {
		if err := fs.Set(name, value); err != nil {
			return err
		}
	}
	return nil
}

func startResourceClaimController(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := resourceclaim.NewController(klog.FromContext(ctx), client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		return fmt.Errorf("resourceclaim controller: %w", err)
	}
	factory.Start(ctx.Done())
	go ctrl.Run(ctx, 2)
	return nil
}
