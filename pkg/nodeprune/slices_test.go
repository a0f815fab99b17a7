package nodeprune_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/pkg/nodeprune"
)

// PoolsReaching keeps the pools that reach a candidate whole: a pool split
// across a candidate and another node, a pool for all nodes, and, where
// the allocator reads them on every node, pools with shared counters.
func TestPoolsReaching(t *testing.T) {
	slice := func(name, pool string, node *string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: gpuDriver, Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 2}, NodeName: node}}
	}
	counters := slice("node-3-counters", "node-3", ptr.To("node-3"))
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "gpu-0"}}
	fabric := slice("fabric", "fabric", nil)
	fabric.Spec.AllNodes = ptr.To(true)
	slices := []*resourceapi.ResourceSlice{
		slice("node-1", "node-1", ptr.To("node-1")),
		slice("node-2", "node-2", ptr.To("node-2")),
		slice("split-a", "split", ptr.To("node-2")),
		slice("split-b", "split", ptr.To("node-1")),
		fabric,
		counters,
		slice("node-3-partitions", "node-3", ptr.To("node-3")),
	}
	names := func(slices []*resourceapi.ResourceSlice) []string {
		var out []string
		for _, s := range slices {
			out = append(out, s.Name)
		}
		return out
	}
	for _, tc := range []struct {
		countersEverywhere bool
		want               []string
	}{
		{false, []string{"node-1", "split-a", "split-b", "fabric"}},
		{true, []string{"node-1", "split-a", "split-b", "fabric", "node-3-counters", "node-3-partitions"}},
	} {
		got := names(nodeprune.PoolsReaching(slices, sets.New("node-1"), tc.countersEverywhere))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("countersEverywhere %v: got %v, want %v", tc.countersEverywhere, got, tc.want)
		}
	}
}

// CountersReachEveryNode must say "stable" exactly where upstream's
// NewAllocator chooses its stable allocator with partitionable devices on:
// each feature turned on beside PartitionableDevices in turn. A Kubernetes
// bump that changes what the stable allocator supports fails here.
func TestCountersReachEveryNodeIsUpstreamsChoice(t *testing.T) {
	base := structured.Features{PartitionableDevices: true}
	value := reflect.ValueOf(&base).Elem()
	for i := range value.NumField() {
		if value.Field(i).Kind() != reflect.Bool {
			continue
		}
		features := base
		reflect.ValueOf(&features).Elem().Field(i).SetBool(true)
		allocator, err := structured.NewAllocator(context.Background(), features, structured.AllocatedState{}, nil, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", value.Type().Field(i).Name, err)
		}
		stable := fmt.Sprintf("%T", allocator) == "*stable.Allocator"
		if got := nodeprune.CountersReachEveryNode(features); got != stable {
			t.Errorf("with %s: CountersReachEveryNode = %v, upstream chose %T", value.Type().Field(i).Name, got, allocator)
		}
	}
	if nodeprune.CountersReachEveryNode(structured.Features{}) {
		t.Error("without PartitionableDevices the stable allocator skips slices with counters")
	}
}
