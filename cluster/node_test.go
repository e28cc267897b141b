package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/internal/svcerr"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

func ent(pk, rk string, n int) *odata.Entity {
	return &odata.Entity{PartitionKey: pk, RowKey: rk, Properties: []odata.Property{{Name: "N", Value: odata.Int32Value(int32(n))}}}
}

// TestReplicates writes through the leader of three nodes and finds every
// replica byte for byte alike, timestamps included.
func TestReplicates(t *testing.T) {
	c := newTestCluster(t, 3, 1)
	ld := c.leader(10 * time.Second)
	s := ld.node.Store()
	ctx := context.Background()
	if _, err := s.CreateTable(ctx, acct, "Replicated"); err != nil {
		t.Fatal(err)
	}
	var last odata.DateTime
	for i := range 50 {
		e, err := s.Apply(ctx, acct, "replicated", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", fmt.Sprintf("r%02d", i%10), i)})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if e.Timestamp <= last {
			t.Fatalf("write %d stamped %d, not after %d", i, e.Timestamp, last)
		}
		last = e.Timestamp
	}
	if _, err := s.ExecuteBatch(ctx, acct, "replicated", []partition.Op{
		{Kind: partition.OpInsert, Entity: ent("q", "a", 1)}, {Kind: partition.OpInsert, Entity: ent("q", "b", 2)},
	}); err != nil {
		t.Fatal(err)
	}
	// A refused command is refused alike everywhere and changes nothing.
	_, err := s.Apply(ctx, acct, "replicated", partition.Op{Kind: partition.OpInsert, Entity: ent("q", "a", 3)})
	if partition.ErrorCode(err) != partition.CodeEntityAlreadyExists {
		t.Fatalf("inserting an existing entity: %v", err)
	}
	got, err := s.GetEntity(ctx, acct, "replicated", "q", "b")
	if err != nil || got.Timestamp <= last {
		t.Fatalf("read through the leader: %v, %d", err, got.Timestamp)
	}

	c.converge(10 * time.Second)
	want := dump(t, ld.node.Replica(), "replicated")
	for id, tn := range c.nodes {
		if got := dump(t, tn.node.Replica(), "replicated"); got != want {
			t.Errorf("node %d differs from the leader:\n%s\n---\n%s", id, got, want)
		}
	}
}

// TestFollowersRefuse: a follower's store answers 503 ServerBusy, naming
// the leader, rather than serving a stale read or taking a write.
func TestFollowersRefuse(t *testing.T) {
	c := newTestCluster(t, 3, 2)
	ld := c.leader(10 * time.Second)
	for id, tn := range c.nodes {
		if id == ld.id {
			continue
		}
		_, err := tn.node.Store().GetTable(context.Background(), acct, "t")
		if codeOf(err) != "ServerBusy" {
			t.Errorf("node %d, a follower, read: %v", id, err)
		}
		_, err = tn.node.Store().CreateTable(context.Background(), acct, "t")
		if codeOf(err) != "ServerBusy" {
			t.Errorf("node %d, a follower, wrote: %v", id, err)
		}
	}
}

// codeOf is the service error code a refusal carries, whether the store
// or the cluster refused.
func codeOf(err error) string {
	var se *svcerr.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return partition.ErrorCode(err)
}

// TestFailover kills the leader as a power loss would, and finds a new
// leader elected that holds every acknowledged write and stamps above
// every timestamp handed out before; the old leader, restarted from what
// its disk kept, catches up and converges.
func TestFailover(t *testing.T) {
	c := newTestCluster(t, 3, 3)
	ctx := context.Background()
	ld := c.leader(10 * time.Second)
	if _, err := ld.node.Store().CreateTable(ctx, acct, "fail"); err != nil {
		t.Fatal(err)
	}
	acked := map[string]odata.DateTime{}
	var newest odata.DateTime
	write := func(s *Store, i int) {
		rk := fmt.Sprintf("r%03d", i)
		e, err := s.Apply(ctx, acct, "fail", partition.Op{Kind: partition.OpInsert, Entity: ent("p", rk, i)})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if e.Timestamp <= newest {
			t.Fatalf("write %d stamped %d, not after %d", i, e.Timestamp, newest)
		}
		acked[rk], newest = e.Timestamp, e.Timestamp
	}
	for i := range 30 {
		write(ld.node.Store(), i)
	}
	old := ld.id
	disk := c.crash(old, nil)

	ld = c.leader(10 * time.Second)
	if ld.id == old {
		t.Fatal("the crashed node still leads")
	}
	for i := 30; i < 60; i++ {
		write(ld.node.Store(), i)
	}
	c.start(old, disk)
	c.converge(10 * time.Second)
	for id, tn := range c.nodes {
		for rk, ts := range acked {
			e, err := tn.node.Replica().GetEntity(ctx, acct, "fail", "p", rk)
			if err != nil || e.Timestamp != ts {
				t.Fatalf("node %d: acknowledged %s@%d: %v, timestamp %d", id, rk, ts, err, e.Timestamp)
			}
		}
	}
}

// TestFailoverTakesOneElectionTimeout: when the leader's node dies, the
// survivor with the smallest id stands as soon as the node has been
// silent for an election timeout, rather than at raft's randomized
// timeout, up to twice that: each of five failovers elects a leader
// within one and a half election timeouts (raft's timeout alone passes
// that bound one time in two).
func TestFailoverTakesOneElectionTimeout(t *testing.T) {
	const tick = 50 * time.Millisecond // room for a loaded machine's delays
	c := startRangeCluster(t, 3, 8, 0, tick)
	bound := 15 * tick // ElectionTicks 10, and a half
	for round := range 5 {
		old := c.leader(30 * time.Second)
		disk := c.crash(old.id, nil)
		killed := time.Now()
		for {
			var ld *testNode
			for _, tn := range c.nodes {
				if tn.node.IsLeader() {
					ld = tn
				}
			}
			if ld != nil {
				break
			}
			if took := time.Since(killed); took > bound {
				t.Fatalf("failover %d: no leader %v after the leader's node died", round, took)
			}
			time.Sleep(tick / 10)
		}
		c.start(old.id, disk)
		c.converge(30 * time.Second)
		// Past the restarted node's first election timeout, in which it
		// neither votes nor stands (replica.voteAfter).
		time.Sleep(12 * tick)
	}
}

// TestDeposedLeaderServesNoStaleRead: a leader whose process stalls while
// cut off from the others still believes it leads after they have elected
// another and written through it. A read it answers then would be stale.
// It read just before the stall, so it held a read lease; the others
// waited an election timeout before electing another, past the lease's
// end, and the ReadIndex round, which needs a quorum, makes it refuse.
func TestDeposedLeaderServesNoStaleRead(t *testing.T) {
	c, old := leaderWithTable(t, 4, 0, "stale")
	ctx := context.Background()
	s := old.node.Store()
	if _, err := s.Apply(ctx, acct, "stale", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", "k", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetEntity(ctx, acct, "stale", "p", "k"); err != nil {
		t.Fatal(err)
	}
	ld := c.stallAndCutOff(old)
	if _, err := ld.node.Store().Apply(ctx, acct, "stale", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", "k", 2)}); err != nil {
		t.Fatal(err)
	}
	if !old.node.IsLeader() {
		t.Fatal("the stalled leader stepped down: the test lost its point")
	}
	e, err := s.GetEntity(ctx, acct, "stale", "p", "k")
	if err == nil {
		t.Fatalf("the deposed leader answered a read (timestamp %d) after its successor's write", e.Timestamp)
	}
	if code := codeOf(err); code != "ServerBusy" {
		t.Fatalf("the deposed leader's refusal: %v", err)
	}
}

// TestDeposedLeaderTellsWhatBecameOfItsWrites: writes a leader takes
// once it is cut off from the others enter its log but never commit; it
// steps down (CheckQuorum), and the others elect a leader and write on.
// Back in touch, the old leader applies the new leader's entries where
// its own were and answers each of its writes ServerBusy, nothing
// written (a client retries that as it is), rather than an ambiguous
// OperationTimedOut; none of them is in the table.
func TestDeposedLeaderTellsWhatBecameOfItsWrites(t *testing.T) {
	c := newTestCluster(t, 3, 7)
	ctx := context.Background()
	old := c.leader(10 * time.Second)
	if _, err := old.node.Store().CreateTable(ctx, acct, "orphans"); err != nil {
		t.Fatal(err)
	}
	others := c.cutOff(old.id)
	const writes = 5
	errs := make(chan error, writes)
	for i := range writes {
		go func() {
			_, err := old.node.Store().Apply(ctx, acct, "orphans", opUpsert("p", fmt.Sprintf("lost%d", i), i))
			errs <- err
		}()
	}
	var ld *testNode
	for deadline := time.Now().Add(10 * time.Second); ld == nil; time.Sleep(5 * time.Millisecond) {
		for _, id := range others {
			if c.nodes[id].node.IsLeader() {
				ld = c.nodes[id]
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the majority elected no leader")
		}
	}
	for i := range writes + 2 {
		if _, err := ld.node.Store().Apply(ctx, acct, "orphans", opUpsert("p", fmt.Sprintf("new%d", i), i)); err != nil {
			t.Fatal(err)
		}
	}
	c.net.heal()
	for range writes {
		select {
		case err := <-errs:
			if code := codeOf(err); code != "ServerBusy" {
				t.Fatalf("a write the deposed leader took: %v (code %q), want ServerBusy", err, code)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a write the deposed leader took was not answered")
		}
	}
	for i := range writes {
		if _, err := ld.node.Store().GetEntity(ctx, acct, "orphans", "p", fmt.Sprintf("lost%d", i)); codeOf(err) != partition.CodeResourceNotFound {
			t.Fatalf("lost%d: %v, want ResourceNotFound", i, err)
		}
	}
}

// TestAnsweredProposalIsNotProposed: a proposal answered while it still
// waited in the loop's queue (a loss of leadership told its caller
// nothing was written) is not written when the loop takes it, even by a
// node that leads (again).
func TestAnsweredProposalIsNotProposed(t *testing.T) {
	c := newTestCluster(t, 3, 9)
	ctx := context.Background()
	ld := c.leader(10 * time.Second)
	s := ld.node.Store()
	if _, err := s.CreateTable(ctx, acct, "queued"); err != nil {
		t.Fatal(err)
	}
	r := ld.node.replica
	w := r.waiters.add(ld.node.cfg.ID)
	cmd := &command.Command{Kind: command.KindApply, ID: w.id, Account: acct, Table: "queued", Ops: []partition.Op{opUpsert("p", "answered", 1)}}
	r.waiters.done(w.id, result{err: errNeverLogged}) // as orphan answers it
	ld.node.proposes <- &proposal{r: r, data: cmd.Append(nil), stamps: 1, w: w}
	// A write queued after it is applied: the loop took the answered one.
	if _, err := s.Apply(ctx, acct, "queued", opUpsert("p", "later", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetEntity(ctx, acct, "queued", "p", "answered"); codeOf(err) != partition.CodeResourceNotFound {
		t.Fatalf("the answered proposal: %v, want ResourceNotFound (it was written)", err)
	}
}

// leaderWithTable starts three nodes (tick: their raft tick, 0 for the
// tests' default) and creates table, in the system group, through the
// leader it returns.
func leaderWithTable(t *testing.T, seed uint64, tick time.Duration, table string) (*testCluster, *testNode) {
	t.Helper()
	c := startRangeCluster(t, 3, seed, 0, tick)
	ld := c.leader(10 * time.Second)
	if _, err := ld.node.Store().CreateTable(context.Background(), acct, table); err != nil {
		t.Fatal(err)
	}
	return c, ld
}

// TestLeaseReads: a leader confirmed by a quorum answers the reads that
// follow by itself, with no round to its followers, for most of an
// election timeout; a read then sees every write acknowledged before it.
func TestLeaseReads(t *testing.T) {
	// 50 ms ticks: a 400 ms lease, renewed every 200 ms or so, however
	// slow a loaded machine makes each write.
	_, ld := leaderWithTable(t, 6, 50*time.Millisecond, "leased")
	ctx := context.Background()
	s := ld.node.Store()
	const reads = 200
	before := ld.node.readRounds.Load()
	for i := range reads {
		w, err := s.Apply(ctx, acct, "leased", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent("p", "k", i)})
		if err != nil {
			t.Fatal(err)
		}
		e, err := s.GetEntity(ctx, acct, "leased", "p", "k")
		if err != nil {
			t.Fatal(err)
		}
		if e.Timestamp != w.Timestamp {
			t.Fatalf("read %d: timestamp %d, the write before it %d", i, e.Timestamp, w.Timestamp)
		}
	}
	// One round starts the lease, and the reads renew it before it ends:
	// a round per read would be 200.
	if rounds := ld.node.readRounds.Load() - before; rounds > reads/4 {
		t.Fatalf("%d read rounds for %d reads", rounds, reads)
	}
}

// TestLeaseReadsNeedNoLoop: a read in the first half of the leader's
// lease is answered while the leader's loop is held (busy writing the
// raft log, say), and once the lease is voided for a hand-over none is.
func TestLeaseReadsNeedNoLoop(t *testing.T) {
	_, ld := leaderWithTable(t, 8, 50*time.Millisecond, "loopless")
	ctx := context.Background()
	s := ld.node.Store()
	if _, err := s.Apply(ctx, acct, "loopless", opUpsert("p", "k", 1)); err != nil {
		t.Fatal(err)
	}
	// held runs during while the loop is held, after it ran onLoop.
	held := func(onLoop, during func()) {
		in, release := make(chan struct{}), make(chan struct{})
		ld.node.calls <- func() {
			onLoop()
			close(in)
			<-release
		}
		<-in
		defer close(release)
		during()
	}
	read := func() error {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := s.GetEntity(rctx, acct, "loopless", "p", "k")
		return err
	}
	covered := false
	for range 20 {
		if covered {
			break
		}
		if _, err := s.GetEntity(ctx, acct, "loopless", "p", "k"); err != nil { // starts or renews the lease
			t.Fatal(err)
		}
		held(func() {}, func() { covered = read() == nil })
	}
	if !covered {
		t.Fatal("no read was answered while the loop was held: every read waited for it")
	}
	held(ld.node.replica.voidLease, func() {
		if err := read(); err == nil {
			t.Fatal("a read was answered from a voided lease")
		}
	})
}

// TestSteppedDownLeaderDropsItsLeaseView: a leader cut off from the
// others steps down (CheckQuorum), and with its leadership goes the lease
// view its reads were answered from without the loop.
func TestSteppedDownLeaderDropsItsLeaseView(t *testing.T) {
	c, old := leaderWithTable(t, 12, 0, "viewed")
	ctx := context.Background()
	s := old.node.Store()
	if _, err := s.GetEntity(ctx, acct, "viewed", "p", "k"); codeOf(err) != partition.CodeResourceNotFound {
		t.Fatalf("a read before the cut: %v", err)
	}
	if old.node.replica.leaseView.Load() == nil {
		t.Fatal("no lease view after a read round: the test lost its point")
	}
	c.cutOff(old.id)
	for deadline := time.Now().Add(10 * time.Second); old.node.IsLeader(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off leader never stepped down")
		}
	}
	// ready goes a moment before the view, in the same turn of the loop;
	// a view nothing drops would stay for good.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		v := old.node.replica.leaseView.Load()
		if v == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stepped-down leader keeps a lease view until %v", v.until)
		}
	}
	if _, err := s.GetEntity(ctx, acct, "viewed", "p", "k"); err == nil || codeOf(err) == partition.CodeResourceNotFound {
		t.Fatalf("the stepped-down leader answered a read: %v", err)
	}
}

// TestCatchUpBySnapshot stops a node while the others write far past
// what their logs keep: restarted, it cannot catch up from the log and
// is sent a snapshot of the leader's store, installs it, and goes on
// from there with the others, byte for byte alike.
func TestCatchUpBySnapshot(t *testing.T) {
	c := newTestCluster(t, 3, 5)
	ctx := context.Background()
	ld := c.leader(10 * time.Second)
	if _, err := ld.node.Store().CreateTable(ctx, acct, "snap"); err != nil {
		t.Fatal(err)
	}
	lag := c.follower(ld)
	disk := c.crash(lag, nil)
	for i := range 300 { // ten times LogRetention, six syncs
		if _, err := ld.node.Store().Apply(ctx, acct, "snap", partition.Op{Kind: partition.OpInsert, Entity: ent(fmt.Sprintf("p%d", i%9), fmt.Sprintf("r%03d", i), i)}); err != nil {
			t.Fatal(err)
		}
	}
	if first, _ := ld.logGroup(systemGroup).FirstIndex(); first < 100 {
		t.Fatalf("the leader's log starts at %d: not compacted, the test lost its point", first)
	}
	tn := c.start(lag, disk)
	for i := 300; i < 310; i++ {
		if _, err := ld.node.Store().Apply(ctx, acct, "snap", partition.Op{Kind: partition.OpInsert, Entity: ent("late", fmt.Sprintf("r%03d", i), i)}); err != nil {
			t.Fatal(err)
		}
	}
	c.converge(20 * time.Second)
	if st := tn.node.Status(); st.SnapshotsInstalled == 0 {
		t.Fatalf("the lagging node caught up without a snapshot: %+v", st.Status)
	}
	want := dump(t, ld.node.Replica(), "snap")
	if got := dump(t, tn.node.Replica(), "snap"); got != want {
		t.Fatalf("the node caught up by snapshot differs:\n%s\n---\n%s", got, want)
	}
	// Restarted again, it reopens the store the snapshot made.
	disk = c.crash(lag, nil)
	tn = c.start(lag, disk)
	c.converge(20 * time.Second)
	if got := dump(t, tn.node.Replica(), "snap"); got != want {
		t.Fatalf("after a restart the node differs:\n%s\n---\n%s", got, want)
	}
}

// TestMembership grows a cluster of three to four and shrinks it back:
// the new node joins as a learner, catches up (by snapshot: the others'
// logs no longer start at the beginning), is promoted to a voter; then a
// founding node is removed and stops, and the three left keep a quorum
// when one more is down.
func TestMembership(t *testing.T) {
	c := newTestCluster(t, 3, 6)
	ctx := context.Background()
	write := func(pk string, n int) {
		t.Helper()
		for i := range n {
			if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
				return s.Apply(ctx, acct, "members", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent(pk, fmt.Sprintf("r%03d", i), i)})
			}); err != nil {
				t.Fatalf("write %s/%d: %v", pk, i, err)
			}
		}
	}
	if _, err := retryLeader(c, func(s *Store) (partition.StoredEntity, error) {
		_, err := s.CreateTable(ctx, acct, "members")
		return partition.StoredEntity{}, err
	}); err != nil {
		t.Fatal(err)
	}
	write("before", 120)

	ld := c.leader(10 * time.Second)
	id, err := ld.node.AddMember(ctx, "sim-4")
	if err != nil || id != 4 {
		t.Fatalf("AddMember: %d, %v", id, err)
	}
	c.peers = append(c.peers, 4)
	joiner := c.startAs(4, vfs.NewMem(), true)
	write("during", 20)
	ld = c.waitVoter(4, 20*time.Second)
	c.converge(20 * time.Second)
	want := dump(t, ld.node.Replica(), "members")
	if got := dump(t, joiner.node.Replica(), "members"); got != want {
		t.Fatalf("the new node differs:\n%s\n---\n%s", got, want)
	}
	if st := joiner.node.Status(); st.SnapshotsInstalled == 0 {
		t.Errorf("the new node caught up without a snapshot, though the logs were compacted")
	}

	// Remove node 1 (asking again if it leads and hands over first).
	for {
		ld = c.leader(10 * time.Second)
		err := ld.node.RemoveMember(ctx, 1)
		if err == nil {
			break
		}
		if codeOf(err) != "ServerBusy" {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-c.nodes[1].done:
		if !errors.Is(err, ErrRemoved) {
			t.Fatalf("the removed node stopped with %v", err)
		}
		c.nodes[1].done <- err // for the cleanup's stop
	case <-time.After(10 * time.Second):
		t.Fatal("the removed node did not stop")
	}
	c.stop(1)
	// Three voters left (2, 3, 4): one more down still leaves a quorum.
	var down uint64
	for id := range c.nodes {
		if !c.nodes[id].node.IsLeader() {
			down = id
			break
		}
	}
	c.crash(down, nil)
	write("after", 10)
}

// TestStoppedWaitsOfLoggedWritesAreAmbiguous: when a replica stops
// tracking its proposals (it leaves its group, or its node stops), a
// write that never entered its log gets the caller's error, and one that
// did (as the leader, or as an orphan of a lost leadership) is
// ambiguous: the next leader may still commit it. A retired member used
// to answer both with ServerBusy ("ask again": nothing written), and the
// chaos run (seed 60, moves) caught such a delete that took effect.
func TestStoppedWaitsOfLoggedWritesAreAmbiguous(t *testing.T) {
	var ws waiters
	never, logged, orphan := ws.add(1), ws.add(1), ws.add(1)
	ws.proposed(logged)
	ws.proposed(orphan)
	ws.appended([]*raftpb.Entry{
		{Index: proto.Uint64(7), Data: (&command.Command{Kind: command.KindApply, ID: logged.id}).Append(nil)},
		{Index: proto.Uint64(8), Data: (&command.Command{Kind: command.KindApply, ID: orphan.id}).Append(nil)},
	})
	ws.orphan() // a lost leadership: never is answered, orphan waits
	if res := <-never.ch; res.err != errNeverLogged {
		t.Fatalf("a proposal never logged, at the loss of the leadership: %v, want errNeverLogged", res.err)
	}
	moved := errBusy("this node's replica was moved away: ask again")
	still := ws.add(1) // proposed again meanwhile, not logged yet
	ws.failAll(moved)
	for name, w := range map[string]*waiter{"a write in the log": logged, "an orphan": orphan} {
		if res := <-w.ch; res.err != errAmbiguous {
			t.Errorf("%s, when the replica stops: %v, want errAmbiguous", name, res.err)
		}
	}
	if res := <-still.ch; res.err != moved {
		t.Errorf("a write not in the log, when the replica stops: %v, want the caller's error", res.err)
	}
}

// TestTakenProposalIsNotCalledUnwritten: a proposal raft took, whose
// entry this node's log never recorded (a higher term stepped before the
// next Ready truncated it, and that Ready still sent the append to the
// followers), is not answered "nothing written" at the loss of the
// leadership, nor "replaced" as this node applies on: another node may
// hold the entry and a later leader commit it. It waits for its result,
// and stopping answers it as ambiguous. One raft never took is answered
// errNeverLogged.
func TestTakenProposalIsNotCalledUnwritten(t *testing.T) {
	var ws waiters
	queued, taken := ws.add(1), ws.add(1)
	ws.proposed(taken)
	ws.orphan()
	if res := <-queued.ch; res.err != errNeverLogged {
		t.Fatalf("a proposal raft never took, at the loss of the leadership: %v, want errNeverLogged", res.err)
	}
	ws.settle(1 << 40)
	select {
	case res := <-taken.ch:
		t.Fatalf("a proposal raft took, with no index here, was answered %v as this node applied on", res.err)
	default:
	}
	ws.done(taken.id, result{}) // its entry applied here: its result
	if res := <-taken.ch; res.err != nil {
		t.Fatalf("applied, it was answered %v", res.err)
	}
	again := ws.add(1)
	ws.proposed(again)
	ws.orphan()
	ws.failAll(errBusy("moved away"))
	if res := <-again.ch; res.err != errAmbiguous {
		t.Fatalf("a proposal raft took, when the replica stops: %v, want errAmbiguous", res.err)
	}
}
