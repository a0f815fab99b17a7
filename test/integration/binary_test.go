package integration

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Invalid DRAScope args stop bin/drascope-scheduler at start: exit code
// non-zero, and the output names the field.
func TestSchedulerBinaryRejectsInvalidArgs(t *testing.T) {
	tests := map[string]struct {
		oldNew []string
		// args are more flags for the binary.
		args []string
		// The output is klog's, which quotes the error: match unquoted parts.
		want []string
	}{
		"policy Taint set where DeviceTaintRules are off": {
			// Unset, the policy follows the gate (TestSchedulerBinaryAdminAccessGateOff);
			// asked for by name, it refuses rather than run without rules.
			oldNew: []string{"      adminAccess:", "      deviceHealth:\n        policy: Taint\n      adminAccess:"},
			args:   []string{"--emulated-version=1.35"},
			want:   []string{"deviceHealth.policy Taint needs the DRADeviceTaintRules feature gate; enable it or choose Avoid"},
		},
		"unknown field": {
			oldNew: []string{"requireNamespaceLabel: true", "requireNamespaceLabels: true"},
			want:   []string{".profiles[0].pluginConfig[0]", "unknown field", "adminAccess.requireNamespaceLabels"},
		},
		"invalid value": {
			oldNew: []string{"      adminAccess:", "      bindingTimeout: 100ms\n      adminAccess:"},
			want:   []string{"scheduler name drascope-scheduler", "pluginConfig[DRAScope].args.bindingTimeout: Invalid value", "100ms", "must be at least 1 second"},
		},
		"scheduler-wide args differ between profiles": {
			// The added profile comes first, so it starts the runtime, and
			// the shipped profile (defaults) is the one refused.
			oldNew: []string{"profiles:\n", "profiles:\n" + otherDRAScopeProfile("drascope-other", "poolStatus:\n        maxWritesPerSecond: 10")},
			want: []string{"scheduler name drascope-scheduler",
				"DRAScope: scheduler-wide args differ between profiles drascope-other and drascope-scheduler",
				"profiles[drascope-scheduler].pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: Invalid value: 5: differs from profiles[drascope-other].pluginConfig[DRAScope].args.poolStatus.maxWritesPerSecond: 10"},
		},
		"unknown scoring strategy": {
			oldNew: []string{"strategy: MostAllocated", "strategy: BinPack"},
			want:   []string{"scheduler name drascope-scheduler", "pluginConfig[DRAScope].args.scoring.strategy: Unsupported value:", "BinPack", "MostAllocated"},
		},
		"wrong type": {
			oldNew: []string{"      adminAccess:", "      filterTimeout: [10s]\n      adminAccess:"},
			want:   []string{".profiles[0].pluginConfig[0]", "DRAScopeArgs.filterTimeout"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			logName := "invalid-args-" + strings.ReplaceAll(name, " ", "-")
			config, err := writeTempConfig(logName, shippedConfigWith(t, tc.oldNew...), env.schedulerKubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			b, err := startSchedulerBinary(logName, append([]string{"--config=" + config, "--leader-elect=false", "--secure-port=0"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-b.Done():
			case <-time.After(waitTimeout):
				b.stop()
				t.Fatalf("drascope-scheduler kept running with invalid args; output:\n%s", b.output())
			}
			var exitErr *exec.ExitError
			if !errors.As(b.Err(), &exitErr) || exitErr.ExitCode() == 0 {
				t.Fatalf("want a non-zero exit code, got %v; output:\n%s", b.Err(), b.output())
			}
			out := b.output()
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output does not contain %q:\n%s", want, out)
				}
			}
		})
	}
}

// KEP-5018 (3): with DRAAdminAccess off (locked on in 1.37, so through
// emulated version 1.35), admin access is refused and the pod stays pending
// with a message naming the claim, the request and the gate. The binary runs
// as deployed: shipped config (under its own profile name), leader election
// on the shipped lease, the manifests' RBAC; as leader it also publishes
// ResourcePools. Emulating 1.35 also turns DRADeviceTaintRules off: the
// shipped config, which leaves deviceHealth.policy unset, must start there
// with Avoid and say so.
func TestSchedulerBinaryAdminAccessGateOff(t *testing.T) {
	const gateOffScheduler = "drascope-gate-off"
	config, err := writeTempConfig("gate-off",
		shippedConfigWith(t, "schedulerName: "+schedulerName, "schedulerName: "+gateOffScheduler),
		env.schedulerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The in-process scheduler (leader election off) is stopped meanwhile:
	// this binary, elected on the shipped lease, is the only one that
	// schedules, publishes ResourcePools and writes.
	restartScheduler(t, func() {
		b, _ := runSchedulerBinary(t, "drascope-scheduler-gate-off", config,
			"--emulated-version=1.35", "--feature-gates=DRAAdminAccess=false")

		s := newScenario(t, adminNamespaceLabels)
		node := s.addNode("gpus", 2)
		s.addClaimTemplate("gpu", false)
		s.addClaimTemplate("gpu-admin", true)

		// An ordinary pod lands: the binary took the lease and schedules.
		s.addPod("worker", gateOffScheduler, fromTemplate("gpu"))
		s.waitForPodScheduled("worker")
		lease, err := env.client.CoordinationV1().Leases(schedulerNamespace).Get(s.ctx, schedulerName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("leader election lease %s/%s: %v", schedulerNamespace, schedulerName, err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("lease %s/%s has no holder", schedulerNamespace, schedulerName)
		}
		// The leader publishes ResourcePools: publishing follows the
		// scheduler's leader election, which the binary wraps.
		rp := s.waitForResourcePool(poolObjectName(t, node), "published by the leading binary", summaryIs(2, 1, 1, 0))
		if rp.Status.DeviceHealthPolicy != "Avoid" {
			t.Errorf("ResourcePool %s: deviceHealthPolicy %q, want Avoid (unset, with DRADeviceTaintRules off)", rp.Name, rp.Status.DeviceHealthPolicy)
		}
		if want := `deviceHealth.policy is not set; using Avoid`; !strings.Contains(b.output(), want) {
			t.Errorf("the scheduler's log does not say %q:\n%s", want, tail(b.output(), 40))
		}

		s.addPod("monitor", gateOffScheduler, fromTemplate("gpu-admin"))
		pod := s.waitForPodUnschedulable("monitor",
			"request gpu: admin access is requested, but the DRAAdminAccess feature gate is disabled")
		claim := s.podClaim(pod)
		if c := scheduledCondition(pod); !strings.Contains(c.Message, "claim "+s.namespace+"/"+claim.Name+",") {
			t.Errorf("message does not name the claim %s/%s: %s", s.namespace, claim.Name, c.Message)
		}
		if claim.Status.Allocation != nil {
			t.Errorf("refused claim %s was allocated: %+v", claim.Name, claim.Status.Allocation)
		}
		b.stop()
	})
}
