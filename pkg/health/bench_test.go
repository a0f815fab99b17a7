package health

import (
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// BenchmarkObservePod is what one event of the scheduler's pod informer
// costs health, for a running DRA pod: before the trust check (a pod
// without claims returns at once), and with it, for a pod that reports
// nothing and one that reports its device.
func BenchmarkObservePod(b *testing.B) {
	logger := klog.Background()
	for _, tc := range []struct {
		name string
		pod  func(w *world) *v1.Pod
	}{
		{"no claims", func(*world) *v1.Pod {
			return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "web"}, Spec: v1.PodSpec{NodeName: "node-1"}}
		}},
		{"claims, no report", func(w *world) *v1.Pod { return w.running("quiet", []Device{gpu0}) }},
		{"claims, Unhealthy report", func(w *world) *v1.Pod { return w.running("loud", []Device{gpu0}, unhealthy(gpu0, "Xid 79")) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, _, w := newTestCache(&testing.T{})
			c.opts.OnChange = nil
			pod := tc.pod(w)
			c.ObservePod(logger, pod)
			b.ReportAllocs()
			for b.Loop() {
				c.ObservePod(logger, pod)
			}
		})
	}
}

// BenchmarkTerminalPodMemory is what the informer of finished pods keeps
// per pod: the heap held by 10000 pods as the apiserver sends them, and as
// slimTerminalPod keeps them. The pods are a typical batch Job's: labels,
// owner, one container with env and resources, one DRA claim.
func BenchmarkTerminalPodMemory(b *testing.B) {
	const n = 10000
	for _, tc := range []struct {
		name   string
		claims bool
		slim   bool
	}{
		{"DRA pod, as sent", true, false},
		{"DRA pod, slim", true, true},
		{"pod without claims, as sent", false, false},
		{"pod without claims, slim", false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				kept := make([]interface{}, 0, n)
				before := heapAlloc()
				for i := range n {
					pod := jobPod(i, tc.claims)
					var obj interface{} = pod
					if tc.slim {
						obj, _ = slimTerminalPod(pod)
					}
					kept = append(kept, obj)
				}
				perPod = float64(heapAlloc()-before) / n
				runtime.KeepAlive(kept)
			}
			b.ReportMetric(perPod, "bytes/pod")
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func jobPod(i int, claims bool) *v1.Pod {
	name := fmt.Sprintf("train-%d-x7k2p", i)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "research", Name: name, UID: types.UID(fmt.Sprintf("6f1c2b7e-0000-4000-8000-%012d", i)), ResourceVersion: "123456",
			Labels:          map[string]string{"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "0d9f", "job-name": "train", "team": "vision"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "0d9f", Controller: ptr.To(true)}},
		},
		Spec: v1.PodSpec{
			NodeName:      "node-17",
			RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{{
				Name: "trainer", Image: "registry.example.com/research/train:v1.4.2",
				Command: []string{"python", "train.py", "--epochs=90", "--batch-size=256"},
				Env:     []v1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}, {Name: "DATASET", Value: "s3://datasets/imagenet"}},
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{}, Claims: []v1.ResourceClaim{{Name: "gpu"}},
				},
			}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodFailed, Reason: "Error", HostIP: "10.0.3.17", PodIP: "10.244.17.5",
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "trainer", Image: "registry.example.com/research/train:v1.4.2", ImageID: "registry.example.com/research/train@sha256:0123456789abcdef",
				ContainerID: "containerd://0123456789abcdef",
				State:       v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}},
			}},
		},
	}
	if claims {
		pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
		pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu-abcde")}}
		pod.Status.ContainerStatuses[0].AllocatedResourcesStatus = []v1.ResourceStatus{{Name: "claim:gpu", Resources: []v1.ResourceHealth{
			{ResourceID: "gpu.example.com/node-17/gpu-3", Health: v1.ResourceHealthStatusHealthy},
		}}}
	}
	return pod
}
