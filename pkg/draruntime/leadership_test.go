package draruntime

import (
	"context"
	"errors"
	"testing"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// lock is a resourcelock.Interface that records nothing and fails on
// demand: the election's real lock is a Lease in the apiserver.
type lock struct {
	identity string
	err      error
}

func (l *lock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return nil, nil, l.err
}
func (l *lock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *lock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *lock) RecordEvent(string)                                              {}
func (l *lock) Identity() string                                                { return l.identity }
func (l *lock) Describe() string                                                { return "kube-system/drascope-scheduler" }

func leading(l *Leadership) bool {
	select {
	case <-l.Leading():
		return true
	default:
		return false
	}
}

func TestLeadershipFollowsTheElectionsLock(t *testing.T) {
	ctx := context.Background()
	inner := &lock{identity: "node-a_1234"}
	config := &leaderelection.LeaderElectionConfig{Lock: inner}
	l := NewLeadership()
	l.Follow(config)
	if leading(l) {
		t.Fatal("leading before the lock was acquired")
	}

	// Another replica holds the lease: renewing its record is not ours.
	if err := config.Lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "node-b_5678"}); err != nil {
		t.Fatal(err)
	}
	// A failed attempt to take it is not leading either.
	inner.err = errors.New("conflict")
	if err := config.Lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "node-a_1234"}); err == nil {
		t.Fatal("the wrapped lock swallowed the error")
	}
	if leading(l) {
		t.Fatal("leading after another holder's record or a failed write")
	}
	inner.err = nil
	if err := config.Lock.Create(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "node-a_1234"}); err != nil {
		t.Fatal(err)
	}
	if !leading(l) {
		t.Error("not leading after the lock was created with this process as holder")
	}
	if config.Lock.Identity() != "node-a_1234" || config.Lock.Describe() != inner.Describe() {
		t.Error("the wrapped lock does not answer as the election's own")
	}
}

func TestLeadershipWithoutElectionLeadsAtOnce(t *testing.T) {
	l := NewLeadership()
	l.Follow(nil)
	if !leading(l) {
		t.Error("without leader election the process must lead")
	}
	if !leading(New().leadership) {
		t.Error("a runtime made without WithLeadership must lead")
	}
}
