package kubectldra

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/describe"

	"github.com/drascope/drascope/apis/drascope/v1alpha1"
	"github.com/drascope/drascope/pkg/drausage"
)

func TestPrintPoolTable(t *testing.T) {
	valid := published("node-1", 1)
	valid.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue}}
	network := published("fabric", 0)
	network.Spec.NodeName = ""
	computed := published("node-2", 0)
	computed.CreationTimestamp = metav1.Time{}
	computed.Status.Summary = nil
	pools := []v1alpha1.ResourcePool{*network, *valid, *computed}

	var out strings.Builder
	if err := printPoolTable(&out, pools, false, now); err != nil {
		t.Fatal(err)
	}
	want := `NAME                     DRIVER            POOL     NODE     TOTAL   ALLOCATED   AVAILABLE   UNAVAILABLE
gpu.example.com.fabric   gpu.example.com   fabric   <none>   2       0           2           0
gpu.example.com.node-1   gpu.example.com   node-1   node-1   2       1           1           0
gpu.example.com.node-2   gpu.example.com   node-2   node-2   0       0           0           0
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}

	out.Reset()
	if err := printPoolTable(&out, pools, true, now); err != nil {
		t.Fatal(err)
	}
	want = `NAME                     DRIVER            POOL     NODE     TOTAL   ALLOCATED   AVAILABLE   UNAVAILABLE   PARTIAL   SLICES   VALID     AGE
gpu.example.com.fabric   gpu.example.com   fabric   <none>   2       0           2           0             0         1/1      Unknown   60m
gpu.example.com.node-1   gpu.example.com   node-1   node-1   2       1           1           0             0         1/1      True      60m
gpu.example.com.node-2   gpu.example.com   node-2   node-2   0       0           0           0             0         1/1      Unknown   <computed>
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("wide table (-want +got):\n%s", diff)
	}
}

func TestPrintNode(t *testing.T) {
	rp := published("node-1", 1)
	detail := &drausage.PoolUsage{Devices: []drausage.DeviceUsage{
		{Name: "gpu-0", State: drausage.DeviceAllocated, Allocations: []drausage.Allocation{{Claim: drausage.ClaimRef{Namespace: "team-a", Name: "train"}}}},
		{Name: "gpu-1", State: drausage.DeviceUnavailable, Reason: drausage.ReasonTainted, Message: "maintenance=true:NoSchedule"},
	}}
	var out strings.Builder
	if err := printNode(&out, "node-1", []v1alpha1.ResourcePool{*rp}, []pooledDetail{{detail: detail}}); err != nil {
		t.Fatal(err)
	}
	want := `Name:   node-1
DRA Resources:
  Pool     Driver            Total   Allocated   Available   Unavailable   Valid
  ----     ------            -----   ---------   ---------   -----------   -----
  node-1   gpu.example.com   2       1           1           0             Unknown
Devices of gpu.example.com.node-1:
  Device   State             Health    Claim          Details
  ------   -----             ------    -----          -------
  gpu-0    Allocated         Unknown   team-a/train   
  gpu-1    Unavailable       Unknown   <none>         Tainted: maintenance=true:NoSchedule
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("describe node (-want +got):\n%s", diff)
	}

	out.Reset()
	if err := printNode(&out, "node-9", nil, nil); err != nil {
		t.Fatal(err)
	}
	if want := "Name:            node-9\nDRA Resources:   <none>\n"; out.String() != want {
		t.Errorf("a node without pools: %q, want %q", out.String(), want)
	}
}

// -o json|yaml prints a list whose items carry apiVersion and kind, as
// kubectl get does.
func TestPoolListSetsTypeMeta(t *testing.T) {
	list := poolList([]v1alpha1.ResourcePool{*published("node-1", 0)})
	if got := list.Items[0].TypeMeta; got.APIVersion != "drascope.dev/v1alpha1" || got.Kind != "ResourcePool" {
		t.Errorf("item TypeMeta %+v", got)
	}
	if empty := poolList(nil); empty.Items == nil {
		t.Error("an empty list must print items: [], not null")
	}
}

func TestFitLine(t *testing.T) {
	pool := func(node string, available int32) v1alpha1.ResourcePool {
		return v1alpha1.ResourcePool{
			Spec:   v1alpha1.ResourcePoolSpec{Driver: "gpu.example.com", PoolName: node, NodeName: node},
			Status: v1alpha1.ResourcePoolStatus{Summary: &v1alpha1.PoolSummary{AvailableDevices: available}},
		}
	}
	fabric := pool("", 40)
	pools := []v1alpha1.ResourcePool{pool("node-b", 8), pool("node-a", 3), pool("node-a", 5), pool("node-c", 7), fabric}
	if got, want := fitLine(pools, 8), "2 of 3 nodes have 8 or more available devices: node-a, node-b"; got != want {
		t.Errorf("fitLine 8:\n got %s\nwant %s", got, want)
	}
	if got, want := fitLine(pools, 9), "0 of 3 nodes have 9 or more available devices"; got != want {
		t.Errorf("fitLine 9:\n got %s\nwant %s", got, want)
	}
	var many []v1alpha1.ResourcePool
	for i := range 12 {
		many = append(many, pool(fmt.Sprintf("node-%02d", i), 1))
	}
	if got := fitLine(many, 1); !strings.HasSuffix(got, "node-09, and 2 more") {
		t.Errorf("fitLine names %q, want ten nodes and a count", got)
	}
}

// A shared device's row says how much of each capacity its shares use.
func TestDeviceDetailsShowCapacityUse(t *testing.T) {
	var out strings.Builder
	w := describe.NewPrefixWriter(&out)
	writeDevices(w, describe.LEVEL_0, &drausage.PoolUsage{Devices: []drausage.DeviceUsage{{
		Name: "shared-0", State: drausage.DevicePartiallyAllocated,
		Capacity: []drausage.CapacityUse{{Name: "memory", Used: resource.MustParse("12Gi"), Total: resource.MustParse("16Gi")}},
	}}}, "")
	if !strings.Contains(out.String(), "capacity memory 12Gi/16Gi used") {
		t.Errorf("device details:\n%s\nwant the capacity used and total", out.String())
	}
}

func TestParseDevice(t *testing.T) {
	for arg, want := range map[string]string{
		"gpu.example.com/node-1/gpu-3":        "gpu.example.com|node-1|gpu-3",
		"gpu.example.com/rack-1/node-1/gpu-3": "gpu.example.com|rack-1/node-1|gpu-3",
		"gpu.example.com/gpu-3":               "error",
		"gpu.example.com/node-1/":             "error",
		"/node-1/gpu-3":                       "error",
		"gpu-3":                               "error",
	} {
		d, err := parseDevice(arg)
		got := d.Driver + "|" + d.Pool + "|" + d.Name
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("parseDevice(%q) = %s (%v), want %s", arg, got, err, want)
		}
	}
}
