package nodeprune_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/nodeprune"
)

// The shortage names the first request no node has enough free devices
// for, with the counts a person acts on; a request some node meets is
// passed over.
func TestFindShortage(t *testing.T) {
	var nodes []*v1.Node
	var slices []*resourceapi.ResourceSlice
	inUse := sets.New[structured.DeviceID]()
	for i := range 3 {
		node := fmt.Sprintf("node-%d", i)
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
		slices = append(slices, nodeLocal(node, dracases.GPUDriver, "gpu-0", "gpu-1", "gpu-2", "gpu-3"), nodeLocal(node, dracases.NICDriver, "nic-0"))
		// node-0 and node-1 have 3 GPUs free, node-2 two.
		inUse.Insert(structured.MakeDeviceID(dracases.GPUDriver, node, "gpu-0"))
		if i == 2 {
			inUse.Insert(structured.MakeDeviceID(dracases.GPUDriver, node, "gpu-1"))
		}
	}
	view := nodeprune.View{Slices: slices, InUse: inUse, Withheld: sets.New[structured.DeviceID]()}
	classes := func(name string) (*resourceapi.DeviceClass, error) { return dracases.Classes.Get(name) }
	claim := claimOf("nic", "gpu")
	claim.Spec.Devices.Requests[1].Exactly.Count = 4
	s, ok := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{claim}, classes, view, nodes)
	want := "claim ns/claim, request gpu (4 × gpu): 3 nodes have matching devices, none has 4 free (most: 3, on 2 nodes)"
	if !ok || s.String() != want {
		t.Errorf("shortage %q (%v), want %q", s.String(), ok, want)
	}
	// A prioritized list is short only when every alternative is: four
	// GPUs, or else one NIC.
	listed := claimOf()
	listed.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "gpus", DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
		{Name: "nic", DeviceClassName: "nic", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}}
	if s, _ := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{listed}, classes, view, nodes); !s.Together {
		t.Errorf("shortage %q, though the second alternative fits", s.String())
	}
	listed.Spec.Devices.Requests[0].FirstAvailable[1].Count = 2
	if s, _ := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{listed}, classes, view, nodes); s.String() != "claim ns/claim, request any (4 × gpu): 3 nodes have matching devices, none has 4 free (most: 3, on 2 nodes)" {
		t.Errorf("shortage %q, want the list named by its first alternative", s.String())
	}
	// Only the nodes passed count: node-2 alone has at most two free.
	if s, _ := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{claim}, classes, view, nodes[2:]); s.String() != "claim ns/claim, request gpu (4 × gpu): 1 node has matching devices, none has 4 free (most: 2, on 1 node)" {
		t.Errorf("shortage %q, want node-2's count alone", s.String())
	}

	// Every GPU in use: none free; an attribute nothing has: no match.
	for _, slice := range slices {
		for _, d := range slice.Spec.Devices {
			view.InUse.Insert(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, d.Name))
		}
	}
	claim.Spec.Devices.Requests[1].Exactly.Count = 1
	if s, _ := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{claim}, classes, view, nodes); s.String() != "claim ns/claim, request nic (1 × nic): 3 nodes have matching devices, none has one free" {
		t.Errorf("shortage %q, want the NICs none free", s.String())
	}
	if s, _ := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{claimOf("a100")}, classes, view, nodes); s.String() != "claim ns/claim, request a100 (1 × a100): no node has a matching device" {
		t.Errorf("shortage %q, want no match for a100 (no device has the model)", s.String())
	}
	// Admin access may use devices in use: never short.
	monitor := claimOf("gpu")
	monitor.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	if s, ok := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{monitor}, classes, view, nodes); ok {
		t.Errorf("shortage %q for admin access", s.String())
	}
	// Requests each of which some node meets: no request is short, the
	// claims fail together (or for what counting cannot see).
	view.InUse = sets.New[structured.DeviceID]()
	if s, ok := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{claimOf("nic", "gpu")}, classes, view, nodes); !ok || !s.Together || s.String() != nodeprune.TogetherNote {
		t.Errorf("shortage %q (%v) on a free cluster, want the claims failing together", s.String(), ok)
	}
	// A class that does not exist: upstream's refusal names it, and
	// nothing is said here.
	if s, ok := nodeprune.FindShortage(context.Background(), []*resourceapi.ResourceClaim{claimOf("nic", "no-such-class")}, classes, view, nodes); ok {
		t.Errorf("shortage %q with a class missing", s.String())
	}
}

// A pod's reason is computed once per ShortageTTL, and the pods remembered
// never exceed MaxShortages.
func TestShortagesAreBounded(t *testing.T) {
	now := time.Unix(0, 0)
	s := &nodeprune.Shortages{Now: func() time.Time { return now }}
	computed := 0
	compute := func() (nodeprune.Shortage, bool) {
		computed++
		return nodeprune.Shortage{Claim: "ns/c", Request: "r", Class: "gpu", Count: 1}, true
	}
	for range 3 {
		s.Reason("pod", compute)
	}
	if computed != 1 {
		t.Errorf("computed %d times within the TTL, want once", computed)
	}
	now = now.Add(nodeprune.ShortageTTL)
	if s.Reason("pod", compute); computed != 2 {
		t.Errorf("computed %d times after the TTL, want twice", computed)
	}
	for i := range 3 * nodeprune.MaxShortages {
		s.Reason(types.UID(fmt.Sprint(i)), compute)
		if s.Len() > nodeprune.MaxShortages {
			t.Fatalf("%d pods remembered, want at most %d", s.Len(), nodeprune.MaxShortages)
		}
	}
}
