package devicechoice_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drascope/drascope/internal/dracases"
	"github.com/drascope/drascope/pkg/devicechoice"
)

// The differential test: on random clusters and claims (internal/dracases),
// upstream's allocator over the driver's order (FirstFit) and over
// devicechoice's order (BestFit), on every node and under every feature
// set. Ordering must never change whether a node fits, and every BestFit
// result must hold devices that were free, each once.
func TestBestFitFitsExactlyWhereFirstFitDoes(t *testing.T) {
	var cases, accepted, differentChoice int
	for seed := range uint64(2000) {
		c := dracases.New(seed)
		inUse := c.InUse // withheld devices included
		ordered := devicechoice.OrderPools(c.Slices, devicechoice.Options{InUse: inUse.Has, Want: 2})
		cases++
		for setName, features := range dracases.FeatureSets {
			state := func() structured.AllocatedState {
				return structured.AllocatedState{
					AllocatedDevices:         inUse.Clone(),
					AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
					AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
				}
			}
			firstFit, err := structured.NewAllocator(context.Background(), features, state(), dracases.Classes, c.Slices, dracases.CEL)
			if err != nil {
				t.Fatalf("seed %d, features %s: %v", seed, setName, err)
			}
			bestFit, err := structured.NewAllocator(context.Background(), features, state(), dracases.Classes, ordered, dracases.CEL)
			if err != nil {
				t.Fatalf("seed %d, features %s: %v", seed, setName, err)
			}
			for _, node := range c.Nodes {
				ff, ffErr := firstFit.Allocate(context.Background(), node, c.Claims)
				bf, bfErr := bestFit.Allocate(context.Background(), node, c.Claims)
				ffOK := ffErr == nil && len(ff) == len(c.Claims)
				bfOK := bfErr == nil && len(bf) == len(c.Claims)
				if ffOK != bfOK {
					t.Errorf("seed %d, features %s, node %s: FirstFit fits %v (%v), BestFit %v (%v)\nclaims: %s",
						seed, setName, node.Name, ffOK, ffErr, bfOK, bfErr, dracases.DescribeClaims(c.Claims))
					continue
				}
				if !bfOK {
					continue
				}
				accepted++
				seen := sets.New[structured.DeviceID]()
				same := true
				for i, result := range bf {
					for j, r := range result.Devices.Results {
						id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
						if r.AdminAccess == nil || !*r.AdminAccess {
							if inUse.Has(id) || (r.ShareID == nil && seen.Has(id)) {
								t.Errorf("seed %d, features %s, node %s: BestFit allocated %s, in use or twice", seed, setName, node.Name, id)
							}
							seen.Insert(id)
						}
						if j < len(ff[i].Devices.Results) && ff[i].Devices.Results[j].Device != r.Device {
							same = false
						}
					}
				}
				if !same {
					differentChoice++
				}
			}
		}
	}
	t.Logf("%d cases: %d node verdicts accepted, %d of them with a different device choice under BestFit", cases, accepted, differentChoice)
	// Most of the generator's devices have neither counters nor a PCIe
	// root, so few choices differ; some must, or the test checks nothing.
	if accepted < cases/2 || differentChoice == 0 {
		t.Errorf("the cases exercised too little: %d accepted, %d different choices", accepted, differentChoice)
	}
}
