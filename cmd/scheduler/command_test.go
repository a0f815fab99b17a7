package main

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// drascope-scheduler builds its command from upstream's pieces so that it
// can reach leader election between app.Setup and app.Run; every flag of
// upstream's command must be here, with the same default and usage.
func TestCommandMatchesUpstream(t *testing.T) {
	upstream := app.NewSchedulerCommand().Flags()
	ours := newCommand().Flags()
	n := 0
	upstream.VisitAll(func(want *pflag.Flag) {
		n++
		got := ours.Lookup(want.Name)
		if got == nil {
			t.Errorf("flag --%s of kube-scheduler is missing", want.Name)
			return
		}
		if want.Name == "help" {
			return // names the command
		}
		if got.DefValue != want.DefValue || got.Usage != want.Usage {
			t.Errorf("flag --%s: default %q, usage %q; kube-scheduler's: %q, %q", want.Name, got.DefValue, got.Usage, want.DefValue, want.Usage)
		}
	})
	ours.VisitAll(func(got *pflag.Flag) {
		if upstream.Lookup(got.Name) == nil {
			t.Errorf("flag --%s is not kube-scheduler's", got.Name)
		}
	})
	if n < 50 {
		t.Errorf("kube-scheduler has %d flags; expected its usual 50 or more", n)
	}
}
