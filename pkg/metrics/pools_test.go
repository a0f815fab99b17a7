package metrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/drascope/drascope/pkg/drausage"
	"github.com/drascope/drascope/pkg/poolcache"
)

// fakeSource serves snapshots, and nothing else, to the collector.
type fakeSource struct{ snapshots []*poolcache.Snapshot }

func (f *fakeSource) List() []*poolcache.Snapshot                   { return slices.Clone(f.snapshots) }
func (f *fakeSource) PendingPodsByDeviceClass() map[string]int      { return nil }
func (f *fakeSource) AvailableDevicesByDeviceClass() map[string]int { return nil }
func (f *fakeSource) PodsWithClaimsByScheduler() map[string]int     { return nil }
func (f *fakeSource) Publishing() (bool, bool, time.Duration)       { return false, false, 0 }
func (f *fakeSource) DeviceQuotas() ([]QuotaAmount, map[string]int) {
	return nil, nil
}

// snapshot is pool i of node node: allocated of its 8 devices allocated,
// the first one reported Unhealthy when unhealthy.
func snapshot(node string, i, allocated int, unhealthy bool) *poolcache.Snapshot {
	s := &poolcache.Snapshot{PoolUsage: drausage.PoolUsage{
		PoolID:         drausage.PoolID{Driver: "gpu.example.com", Pool: fmt.Sprintf("pool-%d", i)},
		NodeName:       node,
		ObservedSlices: 1, ExpectedSlices: 1,
		Summary:          drausage.Summary{Total: 8, Allocated: allocated, Available: 8 - allocated},
		WholeDevicesFree: 8 - allocated,
	}}
	for d := range 8 {
		s.Devices = append(s.Devices, drausage.DeviceUsage{Name: fmt.Sprintf("gpu-%d", d)})
	}
	if unhealthy {
		s.Devices[0].Health.Status = v1.ResourceHealthStatusUnhealthy
	}
	return s
}

// gather returns the collector's per-pool series as "name{labels} value"
// lines, in the order the collector sent each family's series, and fails
// the test where a family was not sent in the order the registry sorts it
// into (label values compared in the order of the labels' names).
func gather(t *testing.T, c *poolCollector) map[string][]string {
	t.Helper()
	ch := make(chan metrics.Metric, 1024)
	go func() {
		c.CollectWithStability(ch)
		close(ch)
	}()
	out := map[string][]string{}
	last := map[string][]string{}
	for m := range ch {
		desc := m.Desc().String()
		name := desc[strings.Index(desc, `"`)+1:]
		name = name[:strings.Index(name, `"`)]
		if name == "resourcepool_controller_pools_total" {
			continue
		}
		var dto dto.Metric
		if err := m.Write(&dto); err != nil {
			t.Fatal(err)
		}
		var labels, values []string
		for _, l := range dto.Label {
			labels = append(labels, l.GetName()+"="+l.GetValue())
			values = append(values, l.GetValue())
		}
		if prev, ok := last[name]; ok && slices.Compare(prev, values) > 0 {
			t.Errorf("%s: %q sent after %q", name, values, prev)
		}
		last[name] = values
		out[name] = append(out[name], fmt.Sprintf("{%s} %v", strings.Join(labels, ","), dto.GetGauge().GetValue()))
	}
	return out
}

// wantSeries fails the test unless got, a family's series as gather
// renders them, are want in that order.
func wantSeries(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func TestPoolSeriesFollowSnapshots(t *testing.T) {
	// A second driver's pool on node-a, with two devices held twice:
	// its conflicts and conditions sort apart from the GPUs'.
	fpga := snapshot("node-a", 9, 2, false)
	fpga.Driver = "fpga.example.com"
	fpga.Conflicts = []drausage.Conflict{{Kind: drausage.OverAllocatedDevice, Subject: "gpu-0"}, {Kind: drausage.OverAllocatedDevice, Subject: "gpu-1"}}
	source := &fakeSource{snapshots: []*poolcache.Snapshot{
		snapshot("node-b", 1, 3, false),
		snapshot("node-a", 2, 8, true),
		fpga,
		snapshot("node-c", 0, 0, false),
	}}
	stop := Export(source)
	defer stop()
	c := &poolCollector{}

	first := gather(t, c)
	wantDevices := []string{
		"{driver=fpga.example.com,node=node-a,pool=pool-9,state=Allocated} 2",
		"{driver=fpga.example.com,node=node-a,pool=pool-9,state=Available} 6",
		"{driver=fpga.example.com,node=node-a,pool=pool-9,state=PartiallyAllocated} 0",
		"{driver=fpga.example.com,node=node-a,pool=pool-9,state=Unavailable} 0",
		"{driver=gpu.example.com,node=node-a,pool=pool-2,state=Allocated} 8",
		"{driver=gpu.example.com,node=node-a,pool=pool-2,state=Available} 0",
		"{driver=gpu.example.com,node=node-a,pool=pool-2,state=PartiallyAllocated} 0",
		"{driver=gpu.example.com,node=node-a,pool=pool-2,state=Unavailable} 0",
		"{driver=gpu.example.com,node=node-b,pool=pool-1,state=Allocated} 3",
		"{driver=gpu.example.com,node=node-b,pool=pool-1,state=Available} 5",
		"{driver=gpu.example.com,node=node-b,pool=pool-1,state=PartiallyAllocated} 0",
		"{driver=gpu.example.com,node=node-b,pool=pool-1,state=Unavailable} 0",
		"{driver=gpu.example.com,node=node-c,pool=pool-0,state=Allocated} 0",
		"{driver=gpu.example.com,node=node-c,pool=pool-0,state=Available} 8",
		"{driver=gpu.example.com,node=node-c,pool=pool-0,state=PartiallyAllocated} 0",
		"{driver=gpu.example.com,node=node-c,pool=pool-0,state=Unavailable} 0",
	}
	wantSeries(t, "devices, sent in label order", first["drascope_resourcepool_devices"], wantDevices)
	wantHealth := []string{
		"{driver=fpga.example.com,health=Healthy,node=node-a,pool=pool-9} 0",
		"{driver=fpga.example.com,health=Unhealthy,node=node-a,pool=pool-9} 0",
		"{driver=fpga.example.com,health=Unknown,node=node-a,pool=pool-9} 8",
		"{driver=gpu.example.com,health=Healthy,node=node-a,pool=pool-2} 0",
		"{driver=gpu.example.com,health=Healthy,node=node-b,pool=pool-1} 0",
		"{driver=gpu.example.com,health=Healthy,node=node-c,pool=pool-0} 0",
		"{driver=gpu.example.com,health=Unhealthy,node=node-a,pool=pool-2} 1",
		"{driver=gpu.example.com,health=Unhealthy,node=node-b,pool=pool-1} 0",
		"{driver=gpu.example.com,health=Unhealthy,node=node-c,pool=pool-0} 0",
		"{driver=gpu.example.com,health=Unknown,node=node-a,pool=pool-2} 7",
		"{driver=gpu.example.com,health=Unknown,node=node-b,pool=pool-1} 8",
		"{driver=gpu.example.com,health=Unknown,node=node-c,pool=pool-0} 8",
	}
	wantSeries(t, "health, sent in label order", first["drascope_resourcepool_device_health"], wantHealth)
	wantValid := []string{
		"{condition=Valid,driver=fpga.example.com,node=node-a,pool=pool-9} 0",
		"{condition=Valid,driver=gpu.example.com,node=node-a,pool=pool-2} 1",
		"{condition=Valid,driver=gpu.example.com,node=node-b,pool=pool-1} 1",
		"{condition=Valid,driver=gpu.example.com,node=node-c,pool=pool-0} 1",
	}
	wantSeries(t, "Valid conditions", first["drascope_resourcepool_condition"][4:], wantValid)
	wantConflicts := []string{
		"{driver=fpga.example.com,kind=OverAllocatedDevice,node=node-a,pool=pool-9} 2",
		"{driver=fpga.example.com,kind=OverConsumedCapacity,node=node-a,pool=pool-9} 0",
		"{driver=fpga.example.com,kind=OverConsumedCounter,node=node-a,pool=pool-9} 0",
	}
	wantSeries(t, "the FPGA pool's conflicts", first["drascope_resourcepool_allocation_conflicts"][:3], wantConflicts)
	for name, series := range first {
		if len(series)%4 != 0 || len(series) == 0 {
			t.Errorf("%s: %d series for 4 pools", name, len(series))
		}
	}
	unchanged := c.made[source.snapshots[1]]

	// node-b's pool changes (a new snapshot), node-c's and the FPGAs' are
	// gone, node-d's is new: the next scrape shows exactly that, and
	// makes nothing for node-a's GPUs, whose snapshot is the same.
	source.snapshots = []*poolcache.Snapshot{snapshot("node-b", 1, 4, false), source.snapshots[1], snapshot("node-d", 3, 1, false)}
	second := gather(t, c)
	wantWhole := []string{
		"{driver=gpu.example.com,node=node-a,pool=pool-2} 0",
		"{driver=gpu.example.com,node=node-b,pool=pool-1} 4",
		"{driver=gpu.example.com,node=node-d,pool=pool-3} 7",
	}
	wantSeries(t, "whole devices free after the change", second["drascope_resourcepool_whole_devices_free"], wantWhole)
	if got, want := len(second["drascope_resourcepool_devices"]), 12; got != want {
		t.Errorf("%d device series after the change, want %d", got, want)
	}
	if len(c.made) != 3 {
		t.Errorf("the collector keeps the series of %d snapshots, want the 3 current ones", len(c.made))
	}
	if again := c.made[source.snapshots[1]]; len(again) == 0 || &again[0] != &unchanged[0] {
		t.Errorf("node-a's series were made again for the same snapshot")
	}

	// A cache that stopped leaves nothing behind.
	stop()
	if third := gather(t, c); len(third) != 0 || c.made != nil {
		t.Errorf("after the cache stopped: %d families sent, %d snapshots kept", len(third), len(c.made))
	}
}

// BenchmarkGatherPools is a scrape of 2000 pools, as scheduler_perf makes
// every second at 2000 nodes, where one pool changed since the last.
func BenchmarkGatherPools(b *testing.B) {
	source := &fakeSource{}
	for i := range 2000 {
		source.snapshots = append(source.snapshots, snapshot(fmt.Sprintf("node-%d", i), i, i%9, i%10 == 0))
	}
	stop := Export(source)
	defer stop()
	registry := metrics.NewKubeRegistry()
	registry.CustomMustRegister(&poolCollector{})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		n := i % len(source.snapshots)
		source.snapshots[n] = snapshot(source.snapshots[n].NodeName, n, i%9, false)
		if _, err := registry.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
