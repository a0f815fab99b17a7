package draruntime

import (
	"context"
	"sync"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Leadership tells the runtime when its process starts leading scheduling:
// then it writes what only one process may write (DeviceTaintRules). The
// scheduler's leader election is set up inside app.Setup and its callbacks
// inside app.Run, out of a plugin's reach; between the two, whoever runs
// the scheduler calls Follow with the config Setup made. kube-scheduler
// exits when it stops leading, so leading lasts until the process ends.
type Leadership struct {
	once    sync.Once
	leading chan struct{}
}

// NewLeadership returns a Leadership that does not lead yet.
func NewLeadership() *Leadership {
	return &Leadership{leading: make(chan struct{})}
}

// Follow follows the scheduler's leader election: config is
// CompletedConfig.LeaderElection from app.Setup, nil when leader election
// is off, in which case the process leads from now on. It wraps the
// election's lock to see when this process acquires it, before app.Run
// starts the election.
func (l *Leadership) Follow(config *leaderelection.LeaderElectionConfig) {
	if config == nil {
		l.lead()
		return
	}
	config.Lock = &observedLock{Interface: config.Lock, acquired: l.lead}
}

// Leading is closed once the process leads scheduling.
func (l *Leadership) Leading() <-chan struct{} {
	return l.leading
}

func (l *Leadership) lead() {
	l.once.Do(func() { close(l.leading) })
}

// observedLock is the election's lock, unchanged, except that a record
// written with this process as holder says that it leads: the elector
// writes one exactly when it acquires or renews the lease.
type observedLock struct {
	resourcelock.Interface
	acquired func()
}

func (o *observedLock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	err := o.Interface.Create(ctx, record)
	o.observe(record, err)
	return err
}

func (o *observedLock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	err := o.Interface.Update(ctx, record)
	o.observe(record, err)
	return err
}

func (o *observedLock) observe(record resourcelock.LeaderElectionRecord, err error) {
	if err == nil && record.HolderIdentity == o.Interface.Identity() {
		o.acquired()
	}
}
