package drascopepreemption

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
)

func TestDecodeArgs(t *testing.T) {
	for name, tc := range map[string]struct {
		args     runtime.Object
		want     config.DefaultPreemptionArgs
		errorHas string
	}{
		"no pluginConfig entry": {
			want: config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100},
		},
		"one field set, the other defaulted": {
			args: &runtime.Unknown{Raw: []byte(`{"minCandidateNodesAbsolute": 5}`)},
			want: config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 5},
		},
		"internal args pass through": {
			args: &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 20, MinCandidateNodesAbsolute: 7},
			want: config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 20, MinCandidateNodesAbsolute: 7},
		},
		"a misspelt field": {
			args:     &runtime.Unknown{Raw: []byte(`{"minCandidateNodesPercent": 5}`)},
			errorHas: `unknown field "minCandidateNodesPercent"`,
		},
		"another plugin's args": {
			args:     &config.NodeResourcesFitArgs{},
			errorHas: "want DefaultPreemptionArgs",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := decodeArgs(tc.args)
			if tc.errorHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errorHas) {
					t.Fatalf("error %v, want one saying %q", err, tc.errorHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.MinCandidateNodesPercentage != tc.want.MinCandidateNodesPercentage || got.MinCandidateNodesAbsolute != tc.want.MinCandidateNodesAbsolute {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}
