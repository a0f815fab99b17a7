package poolpublisher

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/drascope/drascope/pkg/drausage"
)

// plan decides when each pool's object is written. Every pool with an
// unwritten change has a deadline: its oldest unwritten change plus the
// delay the publisher aims for, less what its write and the writes queued
// ahead of it will take. A pool is written at its deadline at the latest;
// the write budget only decides whether a pool may be written earlier, and
// only a pool that is quiet may: not written for the whole delay, and not
// changed for the minimum interval. So a pool that keeps changing is
// written about once per delay, at its deadlines, close to the fewest writes that keep
// every change within the delay (floorChange); a pool that changes after a
// quiet spell is written a minimum interval after its changes settle. Once
// no pool at all has changed for the minimum interval (a burst placed, a
// failover over), every pool is quiet, however lately it was written: a
// cluster with nothing left to place has the budget to spare, and its
// pools are written within seconds instead of at their deadlines. (Were a
// pool not written for half the delay quiet too, busy pools would be
// written twice as often as their changes need; were a pool written within
// the delay to wait for its deadline on a settled cluster too, a
// failover's last placements would show up to 9.5s late.) A pool that has
// no object yet is
// created at the pace of a budget of its own, so that the first
// publication of many pools (a start, nodes joining) is spread out instead
// of falling due together and pushing back the writes of changes.
//
// It is pure: callers pass the time, and hold the publisher's lock.
type plan struct {
	minInterval time.Duration
	maxDelay    time.Duration
	// workers sync pools at once: the writes queued ahead of a pool take
	// latency × queued / workers.
	workers int
	// budget admits early writes of quiet pools; creations paces first
	// publications. Both nil without a budget: quiet pools are then
	// written at once.
	budget, creations *rate.Limiter

	pools map[drausage.PoolID]*poolPlan
	// unwritten counts the pools with an unwritten change; unwrittenNew
	// those of them that have no object, whose creations are paced apart
	// and are not in the queue of writes that deadline counts.
	unwritten, unwrittenNew int
	// latency is a moving average of how long a sync that wrote took.
	latency time.Duration
	// lastChange is when the latest change of any pool was seen.
	lastChange time.Time
	// settling are the pools that wait only for every pool to settle
	// (turnFor): one wake, when the cluster settles, asks them all again,
	// rather than each asking every minimum interval while anything
	// changes.
	settling map[drausage.PoolID]struct{}
}

// poolPlan is what the plan knows of one pool.
type poolPlan struct {
	// since is the pool's oldest change not yet taken up by a sync; zero
	// when there is none.
	since time.Time
	// lastWrite is when the last sync that wrote took up its changes.
	lastWrite time.Time
	// lastChange is when the pool's latest change was seen.
	lastChange time.Time
	// tokenAt is when a budget token this pool holds comes; zero when it
	// holds none.
	tokenAt time.Time
	// new is set while the pool had no object when last asked: its
	// changes wait for its creation, which is paced apart.
	new bool
	// writing is the change a sync has taken up and not finished with,
	// so that a hung write still shows in oldestUnwritten.
	writing time.Time
	// floorFrom is the first change of the pool's latest group for the
	// write floor (see floorChange); zero before its first change.
	floorFrom time.Time
}

func newPlan(minInterval, maxDelay time.Duration, workers int, budget, creations *rate.Limiter) *plan {
	return &plan{
		minInterval: minInterval,
		maxDelay:    maxDelay,
		workers:     workers,
		budget:      budget,
		creations:   creations,
		pools:       map[drausage.PoolID]*poolPlan{},
		settling:    map[drausage.PoolID]struct{}{},
	}
}

func (p *plan) pool(id drausage.PoolID) *poolPlan {
	st := p.pools[id]
	if st == nil {
		st = &poolPlan{}
		p.pools[id] = st
	}
	return st
}

// changed records a change of the pool from at (the oldest change its
// snapshot is the first to show), seen at seen.
func (p *plan) changed(id drausage.PoolID, at, seen time.Time) {
	st := p.pool(id)
	if seen.After(st.lastChange) {
		st.lastChange = seen
	}
	if seen.After(p.lastChange) {
		p.lastChange = seen
	}
	p.unwrittenFrom(st, at)
}

// floorChange counts a change of the pool at at towards the write floor,
// the fewest writes that could have written every change within the
// delay: a write at the first change of a group plus the delay shows every
// change of the group, so a change starts a new group, and needs one more
// write, only when it comes more than the delay after the latest group's
// first change. It reports whether the floor rose.
//
// It counts the changes the side cache reports; one that left the pool's
// status as it was (a claim's reservedFor written after its allocation,
// say) counts too, so the floor is a lower bound where such changes come
// with changes of the status, within a group, as they do when pods are
// placed and removed. It knows nothing of latency, the minimum interval or
// the budget: whatever the publisher writes beyond it is the price of
// those, and of writing quiet pools early. Only changes after the term's
// first write of the pool count: before it, a pool may be waiting for its
// object's creation, which is paced apart and not held to the delay, and a
// single write (its creation) shows all of them.
func (p *plan) floorChange(id drausage.PoolID, at time.Time) bool {
	st := p.pool(id)
	if st.lastWrite.IsZero() || !at.After(st.lastWrite) {
		return false
	}
	if !st.floorFrom.IsZero() && !at.After(st.floorFrom.Add(p.maxDelay)) {
		return false
	}
	st.floorFrom = at
	return true
}

// unwrittenFrom records an unwritten change from at, keeping the oldest.
func (p *plan) unwrittenFrom(st *poolPlan, at time.Time) {
	switch {
	case st.since.IsZero():
		p.unwritten++
		if st.new {
			p.unwrittenNew++
		}
		st.since = at
	case at.Before(st.since):
		st.since = at
	}
}

// oldestUnwritten returns the oldest change of any pool that has an
// object that no write has finished showing: unwritten, or taken up by a
// sync still running.
func (p *plan) oldestUnwritten() (oldest time.Time, ok bool) {
	for _, st := range p.pools {
		if st.new {
			continue
		}
		for _, at := range []time.Time{st.since, st.writing} {
			if !at.IsZero() && (!ok || at.Before(oldest)) {
				oldest, ok = at, true
			}
		}
	}
	return oldest, ok
}

// deadline is when a sync of a change unwritten since since must start
// for its write to land within the delay: the write's own latency and the
// writes queued ahead of it get their time first, all they need of the
// delay, so a pool whose queue needs all of it is due at once. Ahead are,
// at worst, all unwritten pools that have an object; a start's pools
// waiting for their creations are not, and counting them would make every
// busy pool due at once. Aiming at the delay itself would land a busy
// pool's every write just past it; keeping half of the delay for
// coalescing would land a burst whose writes need more than the other half
// (every pool changed at once) past it. It adds no writes where the queue
// is long: there the workers, not the deadlines, pace each pool's writes,
// about once per round of the queue.
func (p *plan) deadline(since time.Time) time.Time {
	ahead := p.latency
	if p.workers > 0 {
		ahead += p.latency * time.Duration(p.unwritten-p.unwrittenNew) / time.Duration(p.workers)
	}
	return since.Add(max(p.maxDelay-ahead, 0))
}

// decision is what the plan says of a pool at one moment.
type decision struct {
	// wait, when positive, is how long until the pool is to ask again.
	wait time.Duration
	// turn is how a sync that goes now was admitted: zero when it has no
	// change to write (its writes, repairs, wait for the budget).
	turn turn
	// since is the change the sync takes up, if pending.
	since   time.Time
	pending bool
	// handedTo, when set, is a new pool that now holds the creation token
	// this pool gave up, and is to ask again in handedIn.
	handedTo drausage.PoolID
	handedIn time.Duration
}

// object says what a sync of a pool would start from.
type object int

const (
	// hasObject: the pool has its object, to update or delete.
	hasObject object = iota
	// toCreate: the pool has no object, and a snapshot to create it from.
	toCreate
	// nothingToWrite: neither an object nor a snapshot (a pool gone before
	// its creation, or not yet counted): a sync writes nothing, so it
	// takes no creation token, which would hold back every new pool queued
	// after it.
	nothingToWrite
)

// decide says whether a sync of the pool may go now. One that goes takes
// up the pool's unwritten change: a change after this starts a deadline of
// its own.
func (p *plan) decide(id drausage.PoolID, now time.Time, obj object) decision {
	st := p.pool(id)
	exists := obj == hasObject
	p.setNew(st, !exists)
	if !st.lastWrite.IsZero() {
		if wait := st.lastWrite.Add(p.minInterval).Sub(now); wait > 0 {
			return decision{wait: wait}
		}
	}
	if st.since.IsZero() {
		return decision{}
	}
	if obj == nothingToWrite {
		var to drausage.PoolID
		var in time.Duration
		if st.new && st.tokenAt.After(now) {
			// The limiter has counted its creation token: the new pool
			// that waits longest takes it, so that pools gone before
			// their turn hold back no pool queued after them.
			to, in = p.handOver(id, st.tokenAt, now)
		}
		st.tokenAt = time.Time{}
		delete(p.settling, id)
		// Turn zero: were a snapshot to come before the sync, a creation
		// would still wait for a token.
		d := p.take(st, 0)
		d.handedTo, d.handedIn = to, in
		return d
	}
	tn, wait, settling := p.turnFor(st, now, exists)
	if settling {
		p.settling[id] = struct{}{}
	} else {
		delete(p.settling, id)
	}
	if wait > 0 {
		if exists {
			// Asked again at least every quarter of the delay: the
			// deadline moves earlier when more pools queue up meanwhile.
			// A new pool has no deadline: it waits for its token.
			wait = min(wait, p.maxDelay/4)
		}
		return decision{wait: wait}
	}
	return p.take(st, tn)
}

// handOver gives a creation token due at tokenAt, which the pool from
// gave up, to the new pool whose token comes last after it; it returns
// that pool and how long until its token, or none.
func (p *plan) handOver(from drausage.PoolID, tokenAt, now time.Time) (drausage.PoolID, time.Duration) {
	var to drausage.PoolID
	var last time.Time
	for id, st := range p.pools {
		if id != from && st.new && st.tokenAt.After(tokenAt) && st.tokenAt.After(last) {
			to, last = id, st.tokenAt
		}
	}
	if last.IsZero() {
		return drausage.PoolID{}, 0
	}
	p.pools[to].tokenAt = tokenAt
	return to, tokenAt.Sub(now)
}

// setNew records whether the pool has no object, keeping unwrittenNew.
func (p *plan) setNew(st *poolPlan, isNew bool) {
	if st.new == isNew {
		return
	}
	if !st.since.IsZero() {
		if isNew {
			p.unwrittenNew++
		} else {
			p.unwrittenNew--
		}
	}
	st.new = isNew
}

// take lets a sync of the pool go now, with its unwritten change.
func (p *plan) take(st *poolPlan, tn turn) decision {
	d := decision{turn: tn, since: st.since, pending: true}
	st.writing, st.since = st.since, time.Time{}
	p.unwritten--
	if st.new {
		p.unwrittenNew--
	}
	return d
}

// turnFor is the turn of a pool with an unwritten change, or how long it
// waits for one; settling says that it may go early once every pool has
// settled (see wakeSettled), which the wait does not count.
func (p *plan) turnFor(st *poolPlan, now time.Time, exists bool) (tn turn, wait time.Duration, settling bool) {
	if !exists {
		tn, wait = p.reserve(st, p.creations, now, time.Time{})
		return tn, wait, false
	}
	due := p.deadline(st.since)
	if !now.Before(due) {
		// A token it holds is not needed.
		st.tokenAt = time.Time{}
		return pastBudget, 0, false
	}
	if quiet := p.quietFrom(st); now.Before(quiet) && now.Before(p.settledFrom()) {
		// Written within the delay: early only once every pool has
		// settled (a cluster with nothing left to place, as after a
		// burst or a failover), and then like a quiet pool; or once it
		// is quiet itself. While anything changes, its changes are
		// those a write at its deadline shows anyway. A token it holds
		// is kept meanwhile.
		return 0, min(due.Sub(now), quiet.Sub(now)), true
	}
	tn, wait = p.reserve(st, p.budget, now, due)
	return tn, wait, false
}

// settledFrom is when every pool will have settled, if none changes
// before: the minimum interval after the latest change of any.
func (p *plan) settledFrom() time.Time {
	return p.lastChange.Add(p.minInterval)
}

// settleCheckIn says whether pools wait for every pool to settle, and in
// how long it may have.
func (p *plan) settleCheckIn(now time.Time) (time.Duration, bool) {
	if len(p.settling) == 0 {
		return 0, false
	}
	return max(p.settledFrom().Sub(now), 0), true
}

// wakeSettled returns the pools waiting for every pool to settle, and
// forgets them, once it has; until then, how long until it may have
// (zero, with no pools, when none waits).
func (p *plan) wakeSettled(now time.Time) (ids []drausage.PoolID, wait time.Duration) {
	if len(p.settling) == 0 {
		return nil, 0
	}
	if settled := p.settledFrom(); now.Before(settled) {
		return nil, settled.Sub(now)
	}
	ids = make([]drausage.PoolID, 0, len(p.settling))
	for id := range p.settling {
		ids = append(ids, id)
	}
	clear(p.settling)
	return ids, 0
}

// quietFrom is when a pool may next be written early while other pools
// change: at once if never written; otherwise the delay after its last
// write or a minimum interval after its last change, whichever comes last.
// A pool written within the delay waits for its deadline: its changes since
// then are those a write at the deadline shows anyway.
func (p *plan) quietFrom(st *poolPlan) time.Time {
	if st.lastWrite.IsZero() {
		return time.Time{}
	}
	written := st.lastWrite.Add(p.maxDelay)
	if settled := st.lastChange.Add(p.minInterval); settled.After(written) {
		return settled
	}
	return written
}

// reserve takes the next token of limiter for the pool if it comes before
// due (zero: whenever it comes); otherwise the pool waits until due. It
// never blocks: a pool waits in the queue, not in a worker, and holds at
// most one token, so pools waiting for the budget do not all wake at each
// token.
func (p *plan) reserve(st *poolPlan, limiter *rate.Limiter, now, due time.Time) (turn, time.Duration) {
	if !st.tokenAt.IsZero() {
		if wait := st.tokenAt.Sub(now); wait > 0 {
			return 0, wait
		}
		st.tokenAt = time.Time{}
		return withinBudget, 0
	}
	if limiter == nil {
		return withinBudget, 0
	}
	reservation := limiter.ReserveN(now, 1)
	delay := reservation.DelayFrom(now)
	if reservation.OK() && (due.IsZero() || !now.Add(delay).After(due)) {
		if delay > 0 {
			st.tokenAt = now.Add(delay)
			return 0, delay
		}
		return withinBudget, 0
	}
	reservation.CancelAt(now)
	return 0, due.Sub(now)
}

// putBack returns a change a sync took up but did not write.
func (p *plan) putBack(id drausage.PoolID, d decision) {
	p.finished(id)
	if d.pending {
		p.unwrittenFrom(p.pool(id), d.since)
	}
}

// finished records that a sync is over, whatever it did.
func (p *plan) finished(id drausage.PoolID) {
	if st := p.pools[id]; st != nil {
		st.writing = time.Time{}
	}
}

// wrote records a sync that took up its changes at start and wrote them
// by end.
func (p *plan) wrote(id drausage.PoolID, start, end time.Time) {
	p.finished(id)
	st := p.pool(id)
	// A write leaves an object: from now on the pool's changes count
	// among the writes queued ahead of others, even before it is next
	// asked.
	p.setNew(st, false)
	st.lastWrite = start
	const weight = 5
	p.latency += (end.Sub(start) - p.latency) / weight
}

// forget drops a pool whose object is gone and that has nothing unwritten,
// so that the plan does not grow with pools long deleted.
func (p *plan) forget(id drausage.PoolID) {
	if st := p.pools[id]; st != nil && st.since.IsZero() && st.tokenAt.IsZero() && st.writing.IsZero() {
		delete(p.pools, id)
		delete(p.settling, id)
	}
}
