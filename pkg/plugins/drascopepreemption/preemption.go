// Package drascopepreemption is the DRAScopePreemption scheduler plugin:
// upstream's DefaultPreemption, unchanged, except that a pod group's
// preemption tells DRAScope it is running, so that the victims' devices
// count as free while it evaluates the group (docs/gangs.md, "Preemption").
//
// Upstream's pod-group preemption removes the victims from the scheduler's
// snapshot without calling any plugin's RemovePod; only the context it
// passes down reaches DRAScope's PreFilter in the dry run. Wrapping
// DefaultPreemption, rather than running a second evaluator from DRAScope,
// keeps one Executor, which DefaultPreemption's PreEnqueue consults to hold
// a group back while its victims are being evicted.
package drascopepreemption

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/drascope/drascope/pkg/plugins/drascope"
)

// Name is the plugin's name in a KubeSchedulerConfiguration. A profile
// enables it in place of DefaultPreemption, after DRAScope.
const Name = "DRAScopePreemption"

// Preemption is DefaultPreemption under another name, with
// PodGroupPostFilter marking its context for DRAScope.
type Preemption struct {
	*defaultpreemption.DefaultPreemption
	handle fwk.Handle
}

var (
	_ fwk.PostFilterPlugin         = &Preemption{}
	_ fwk.PodGroupPostFilterPlugin = &Preemption{}
	_ fwk.PreEnqueuePlugin         = &Preemption{}
	_ fwk.EnqueueExtensions        = &Preemption{}
)

// New builds the plugin. Its args are DefaultPreemption's
// (minCandidateNodesPercentage, minCandidateNodesAbsolute), with the same
// defaults and validation.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s plugin args: %w", Name, err)
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	inner, err := defaultpreemption.New(ctx, args, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &Preemption{DefaultPreemption: inner, handle: fh}, nil
}

// Name returns the plugin's name.
func (pl *Preemption) Name() string { return Name }

// PodGroupPostFilter runs DefaultPreemption's with the snapshot's pods that
// use claims, as they are before it removes any, in the context.
func (pl *Preemption) PodGroupPostFilter(ctx context.Context, state fwk.PodGroupCycleState, pgInfo fwk.PodGroupInfo, schedule fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	ctx = drascope.WithPodGroupPreemption(ctx, pl.handle.SnapshotSharedLister())
	return pl.DefaultPreemption.PodGroupPostFilter(ctx, state, pgInfo, schedule)
}

// decodeArgs accepts what the scheduler hands an out-of-tree plugin: nil
// without a pluginConfig entry, or the entry's raw args; they are decoded,
// defaulted and converted as DefaultPreemptionArgs, which a pluginConfig
// entry for DRAScopePreemption may set without kind or apiVersion.
func decodeArgs(obj runtime.Object) (*config.DefaultPreemptionArgs, error) {
	versioned := &configv1.DefaultPreemptionArgs{}
	switch obj := obj.(type) {
	case nil:
	case *runtime.Unknown:
		if len(obj.Raw) > 0 {
			decoder := json.NewDecoder(bytes.NewReader(obj.Raw))
			decoder.DisallowUnknownFields()
			if err := decoder.Decode(versioned); err != nil {
				return nil, fmt.Errorf("decoding as DefaultPreemptionArgs: %w", err)
			}
		}
	case *config.DefaultPreemptionArgs:
		return obj, nil
	default:
		return nil, fmt.Errorf("got %T, want DefaultPreemptionArgs", obj)
	}
	schedscheme.Scheme.Default(versioned)
	args := &config.DefaultPreemptionArgs{}
	if err := schedscheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, err
	}
	return args, nil
}
