package drascope

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/drascope/drascope/pkg/filtermemo"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// snapshotHandle is a framework handle whose snapshot is a fixed one.
type snapshotHandle struct {
	fwk.Handle
	snapshot fwk.SharedLister
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister { return h.snapshot }

// BenchmarkRefusedAttempt: the scheduling cycle of a pod that no node can
// serve, on full clusters of 10 GPUs per node (every GPU held by a claim),
// as the scheduler runs it, per pod: upstream's PreFilter (v1.37.2) alone,
// upstream's PreFilter and its Filter on every node (upstream's whole
// refused attempt; the scheduler runs Filter on 16 goroutines, here one),
// and DRAScope's PreFilter, which refuses the pod (node pruning, with the
// availability index fed as the scheduler feeds it).
func BenchmarkRefusedAttempt(b *testing.B) {
	for _, nodes := range []int{500, 2000} {
		b.Run(fmt.Sprintf("%dnodes", nodes), func(b *testing.B) {
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
			defer cancel()
			pl, upstream, _, pod, infos := heldCluster(ctx, b, nodeNames(nodes), 10, func(string, int) bool { return false },
				feature.Features{EnableDynamicResourceAllocation: true})

			b.Run("upstream-PreFilter", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, status := upstream.PreFilter(ctx, framework.NewCycleState(), pod, infos); !status.IsSuccess() {
						b.Fatal(status)
					}
				}
			})
			b.Run("upstream-PreFilter-Filter", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					state := framework.NewCycleState()
					if _, status := upstream.PreFilter(ctx, state, pod, infos); !status.IsSuccess() {
						b.Fatal(status)
					}
					for _, info := range infos {
						if status := upstream.Filter(ctx, state, pod, info); status.IsSuccess() {
							b.Fatalf("%s: upstream's Filter accepts the pod on a full cluster", info.Node().Name)
						}
					}
				}
			})
			b.Run("drascope-PreFilter", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, status := pl.PreFilter(ctx, framework.NewCycleState(), pod, infos); status.Code() != fwk.UnschedulableAndUnresolvable || !strings.HasPrefix(status.Message(), noFreeDevice) {
						b.Fatalf("DRAScope's PreFilter: %v, want %q", status, noFreeDevice)
					}
				}
			})
		})
	}
}

// BenchmarkPlacedAttempt: the scheduling cycle of a pod that fits, on a
// nearly full cluster of 10 GPUs per node where one node in 200 has a free
// GPU, per pod: upstream's PreFilter and its Filter on every node (one
// goroutine), and DRAScope's PreFilter and the Filter on the nodes it
// leaves (pruning, and upstream's PreFilter and Filter on the pruned view),
// under the scheduler's default feature gates.
func BenchmarkPlacedAttempt(b *testing.B) {
	for _, nodes := range []int{500, 2000} {
		b.Run(fmt.Sprintf("%dnodes", nodes), func(b *testing.B) {
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
			defer cancel()
			// One node in 200 has a free GPU.
			free := (nodes + 199) / 200
			// The scheduler's features at the default gates, which choose
			// the allocator it runs.
			fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
			pl, upstream, _, pod, infos := heldCluster(ctx, b, nodeNames(nodes), 10, func(node string, device int) bool {
				var n int
				fmt.Sscanf(node, "node-%d", &n)
				return n%200 == 0 && device == 0
			}, fts)

			b.Run("upstream-PreFilter-Filter", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					state := framework.NewCycleState()
					if _, status := upstream.PreFilter(ctx, state, pod, infos); !status.IsSuccess() {
						b.Fatal(status)
					}
					fits := 0
					for _, info := range infos {
						if upstream.Filter(ctx, state, pod, info).IsSuccess() {
							fits++
						}
					}
					if fits != free {
						b.Fatalf("upstream's Filter accepts %d nodes, want %d", fits, free)
					}
				}
			})
			b.Run("drascope-PreFilter-Filter", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					state := framework.NewCycleState()
					result, status := pl.PreFilter(ctx, state, pod, infos)
					if !status.IsSuccess() || result.AllNodes() || result.NodeNames.Len() != free {
						b.Fatalf("DRAScope's PreFilter: %v, %v; want the %d nodes with a free GPU", result, status, free)
					}
					for _, info := range infos {
						if result.NodeNames.Has(info.Node().Name) && !pl.Filter(ctx, state, pod, info).IsSuccess() {
							b.Fatalf("DRAScope's Filter refuses %s, a node with a free GPU", info.Node().Name)
						}
					}
				}
			})
		})
	}
}

// heldCluster is a DRAScope over upstream's real plugin (through the
// decorator) on nodes of devices GPUs each, every GPU held by a claim of its
// own but those free says are free, with the availability index fed as the
// scheduler feeds it, and the pod that asks for one GPU.
func heldCluster(ctx context.Context, tb testing.TB, nodes []string, devices int, free func(node string, device int) bool, fts feature.Features) (*DRAScope, *dynamicresources.DynamicResources, *recordingManager, *v1.Pod, []fwk.NodeInfo) {
	tb.Helper()
	return heldClusterFor(ctx, tb, captureClaim("mine"), nodes, devices, free, fts)
}

// heldClusterFor is heldCluster with the pod's claim given.
func heldClusterFor(ctx context.Context, tb testing.TB, mine *resourceapi.ResourceClaim, nodes []string, devices int, free func(node string, device int) bool, fts feature.Features) (*DRAScope, *dynamicresources.DynamicResources, *recordingManager, *v1.Pod, []fwk.NodeInfo) {
	tb.Helper()
	pod := capturePod(mine)
	objects := []runtime.Object{&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: captureDriver}}, mine, pod}
	index := nodeprune.NewIndex(nodeprune.IndexOptions{})
	var nodeObjects []*v1.Node
	for _, node := range nodes {
		nodeObjects = append(nodeObjects, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		objects = append(objects, captureSlice(node, devices))
		for d := range devices {
			if free(node, d) {
				continue
			}
			claim := captureClaim(fmt.Sprintf("fill-%s-%d", node, d), node, fmt.Sprintf("gpu-%d", d))
			claim.ResourceVersion = "1"
			objects = append(objects, claim)
			index.SetClaim(claim)
		}
	}
	upstream, manager, recording := upstreamThroughDecorator(ctx, tb, objects, fts, nil)
	snapshot := internalcache.NewSnapshot(nil, nodeObjects)
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		tb.Fatal(err)
	}
	pl := &DRAScope{DynamicResources: upstream, enabled: true, features: fts, manager: manager, claims: manager.ResourceClaims(), index: index,
		handle: snapshotHandle{snapshot: snapshot}, filterMemo: &filtermemo.Memo{}}
	return pl, upstream, recording, pod, infos
}

// nodeNames are node-0 to node-(n-1).
func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	return names
}

// BenchmarkOpenAttempt: the scheduling cycle of a pod that fits, on 500
// nodes of 10 GPUs that are not full, as scheduler_perf's empty_500nodes
// and half_500nodes leave them (half: 2500 GPUs held, each on a node
// picked at random, as allocResourceClaims picks them), per pod: upstream's
// PreFilter and its Filter, and DRAScope's PreFilter and Filter, each on
// the nodes the scheduler would filter (it stops at the feasible nodes it
// wants, from where the last cycle stopped), then Reserve and Unreserve on
// the first node found, under the default gates. Nothing much can be pruned
// there; DRAScope's filter memo answers for the nodes whose inputs did not
// change since the last pod.
func BenchmarkOpenAttempt(b *testing.B) {
	const nodes, devices = 500, 10
	for _, tc := range []struct {
		name string
		held int
	}{{"empty", 0}, {"half", nodes * devices / 2}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
			defer cancel()
			held := randomlyHeld(nodes, devices, tc.held)
			fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
			pl, upstream, _, pod, infos := heldCluster(ctx, b, nodeNames(nodes), devices, func(node string, device int) bool {
				return !held[node][device]
			}, fts)
			// filter returns the first feasible node.
			filter := func(filterOne func(fwk.NodeInfo) bool, candidates []fwk.NodeInfo, next *int) string {
				want, found, processed, first := feasibleNodesToFind(len(candidates)), 0, 0, ""
				for ; processed < len(candidates) && found < want; processed++ {
					node := candidates[(*next+processed)%len(candidates)]
					if filterOne(node) {
						found++
						if first == "" {
							first = node.Node().Name
						}
					}
				}
				*next = (*next + processed) % len(candidates)
				if found != want {
					b.Fatalf("%d feasible nodes, want %d", found, want)
				}
				return first
			}
			type reserver interface {
				Reserve(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status
				Unreserve(context.Context, fwk.CycleState, *v1.Pod, string)
			}
			reserve := func(p reserver, state fwk.CycleState, node string) {
				if status := p.Reserve(ctx, state, pod, node); !status.IsSuccess() {
					b.Fatalf("Reserve on %s: %v", node, status)
				}
				p.Unreserve(ctx, state, pod, node)
			}

			b.Run("upstream-PreFilter-Filter", func(b *testing.B) {
				next := 0
				b.ReportAllocs()
				for b.Loop() {
					state := framework.NewCycleState()
					if _, status := upstream.PreFilter(ctx, state, pod, infos); !status.IsSuccess() {
						b.Fatal(status)
					}
					node := filter(func(info fwk.NodeInfo) bool { return upstream.Filter(ctx, state, pod, info).IsSuccess() }, infos, &next)
					reserve(upstream, state, node)
				}
			})
			memo := pl.filterMemo
			for _, name := range []string{"drascope-PreFilter-Filter", "drascope-PreFilter-Filter-without-memo"} {
				b.Run(name, func(b *testing.B) {
					pl.filterMemo = memo
					if strings.HasSuffix(name, "without-memo") {
						pl.filterMemo = nil
					}
					next := 0
					b.ReportAllocs()
					for b.Loop() {
						state := framework.NewCycleState()
						result, status := pl.PreFilter(ctx, state, pod, infos)
						if !status.IsSuccess() {
							b.Fatal(status)
						}
						candidates := infos
						if !result.AllNodes() {
							candidates = nil
							for _, info := range infos {
								if result.NodeNames.Has(info.Node().Name) {
									candidates = append(candidates, info)
								}
							}
						}
						node := filter(func(info fwk.NodeInfo) bool { return pl.Filter(ctx, state, pod, info).IsSuccess() }, candidates, &next)
						reserve(pl, state, node)
					}
				})
			}
		})
	}
}

// randomlyHeld holds count of the nodes' devices, each on a node picked at
// random among those with a free device, with a fixed seed.
func randomlyHeld(nodes, devices, count int) map[string][]bool {
	held := map[string][]bool{}
	names := nodeNames(nodes)
	for _, node := range names {
		held[node] = make([]bool, devices)
	}
	random := rand.New(rand.NewPCG(1, 2))
	used := make([]int, nodes)
	for range count {
		n := random.IntN(nodes)
		for used[n] == devices {
			n = random.IntN(nodes)
		}
		held[names[n]][used[n]] = true
		used[n]++
	}
	return held
}

// feasibleNodesToFind is how many feasible nodes the scheduler looks for
// among n at the default percentageOfNodesToScore (v1.37.2's
// numFeasibleNodesToFind: every node below 100, else 50% less one point
// per 125 nodes, at least 5%, at least 100 nodes).
func feasibleNodesToFind(n int) int {
	if n < 100 {
		return n
	}
	percentage := max(50-n/125, 5)
	return max(n*percentage/100, 100)
}
