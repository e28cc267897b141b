package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/raftlog"
	"github.com/tabuladb/tabula/cluster/transport"
)

// replica is this node's member of one raft group: the group's raft state
// machine, its proposals and reads in flight, its leadership as this node
// sees it, and how far it has applied. Every replica of a node shares the
// node's loop, raft log, transport, apply goroutine and store.
//
// The system group (group 1) replicates the table service's catalog, and
// the entities of the tables that have no range group; a range group
// replicates one table's entities (range_group.go), its members moving
// as the table's descriptor says (range_members.go).
type replica struct {
	n     *Node
	group uint64
	// id is the replica's raft id in its group: the node's id in the
	// system group and in a range group it founded; a member added to a
	// range group later has one of its own (transport.ReplicaID).
	id   uint64
	rlog *raftlog.Storage
	// rn is the group's raft state machine (loop-owned), started from
	// storage; nil while the replica is dormant (dormant.go), which
	// rawNode ends.
	rn      *raft.RawNode
	storage raft.Storage

	// conf is the group's configuration as the loop last applied it (for
	// the system group, the node's membership); readers on other
	// goroutines take confMu. confIndex is the log index a range group's
	// took effect at (loop-owned): a span snapshot must be at or past it
	// to carry it (range_snapshot.go).
	confMu    sync.Mutex
	conf      *raftpb.ConfState
	confIndex uint64

	// Leadership, as the loop last saw it; readers are other goroutines.
	leader atomic.Uint64 // the leader's id, 0 when none is known
	// ready is set while this node is the leader and has applied every
	// entry committed before its term (the entries up to readyAt): only
	// then may it stamp commands and answer reads. leaderMu orders the
	// loop's changes of role with the apply goroutine's setting of ready.
	ready    atomic.Bool
	leaderMu sync.Mutex
	isLeader bool
	readyAt  uint64
	// dormantLeader is set while the replica is a leader that dropped its
	// raft state, and wakeAsked once a request asked the loop to wake it
	// (dormant.go).
	dormantLeader atomic.Bool
	wakeAsked     atomic.Bool
	// wokenForLease is the tick the lease balancer woke the dormant
	// leader at, to hand its lease over, and reelectUntil the tick its
	// own election, once woken, is left alone until (loop-owned).
	wokenForLease, reelectUntil uint64

	// The loop's own state: the stamp clock's last issued timestamp, the
	// read batches waiting for their ReadIndex, and whether the group is
	// quiesced (not ticked; see quiesce.go).
	lastStamp  int64
	readSeq    uint64
	readsByCtx map[string]readRound
	lease      readLease
	// leaseView is the first half of lease, for the request goroutines:
	// a read it covers is answered without the loop (read.go).
	leaseView atomic.Pointer[leaseView]
	// catchUp is the replica's last question of its leader's commit
	// index (catch_up.go), nil until it asks one.
	catchUp *catchUp
	// voteAfter is the node tick before which this replica neither votes
	// nor campaigns on the node's word: a replica that had state when it
	// started may have been part of the quorum a leader's read lease
	// counts on, and has forgotten it (readLease).
	voteAfter uint64
	// quiesced is set while the group is not ticked (quiesce.go): the
	// loop sets it, tests and status read it.
	quiesced atomic.Bool
	// quietTicks counts the ticks the replica has been quiesced for
	// (dormant.go).
	quietTicks int
	// campaignLeft counts down the ticks a new group's creator keeps
	// calling elections (range_host.go); lostLead is the leader's node
	// standForLostLeader last saw, while it stands.
	campaignLeft int
	lostLead     uint64
	// votersBehind is set when the replica last quiesced as the leader
	// with a voter lacking entries (one not live then): only such a
	// voter's return wakes it (mustWake).
	votersBehind bool
	// spans is a range group's snapshot state (range_snapshot.go), and
	// install the install of one under way (span_install.go; loop-owned).
	spans   spanSnapshots
	install *spanInstall
	// tableless marks a range group hostGroup was given without a table
	// of its own (tests): it writes the tables that have no group.
	tableless bool
	// members is a range group's work on its membership (range_members.go).
	members rangeMembers
	// handover is a lease hand-over under way (lease.go); handingOver is
	// set meanwhile, for the request goroutines.
	handover    handover
	handingOver atomic.Bool

	// applied is the index of the last entry applied; appliedTS the
	// newest commit timestamp among the commands applied. sinceSync is
	// the apply goroutine's count of entries applied since the last sync.
	applied   atomic.Uint64
	appliedTS atomic.Int64
	appliedMu sync.Mutex
	// appliedCh is closed at the next advance of applied, made when a
	// waiter needs it (most advances have none: the channel cost an
	// allocation per apply and per idle replica).
	appliedCh chan struct{}
	sinceSync uint64

	waiters waiters
	// notices are the commit notices a range group's leader holds back
	// (commit_notice.go).
	notices commitNotices
}

// newReplica starts the raft state machine of group on this node, as
// member id, from storage (the group's log, and for the system group its
// snapshots) and the index its store has applied.
// fresh says the group had no state on this node before: it cannot have
// been part of any leader's quorum (see voteAfter). A dormant replica
// starts without its raft state machine (rawNode starts it).
func newReplica(n *Node, group, id uint64, rlog *raftlog.Storage, storage raft.Storage, applied uint64, fresh, dormant bool) (*replica, error) {
	r := &replica{
		n:         n,
		group:     group,
		id:        id,
		conf:      rlog.ConfState(), // shared with the log, one copy a group
		confIndex: rlog.Replica().ConfIndex,
		rlog:      rlog,
		storage:   storage,
	}
	r.applied.Store(applied)
	if dormant {
		return r, nil
	}
	var err error
	if r.rn, err = r.newRawNode(applied); err != nil {
		return nil, err
	}
	if !fresh {
		r.voteAfter = n.live.ticks + uint64(n.cfg.ElectionTicks)
	}
	return r, nil
}

// newRawNode starts the replica's raft state machine from its storage,
// with the store's applied index.
func (r *replica) newRawNode(applied uint64) (*raft.RawNode, error) {
	c := &r.n.cfg
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              r.id,
		ElectionTick:    c.ElectionTicks,
		HeartbeatTick:   c.HeartbeatTicks,
		Storage:         r.storage,
		Applied:         applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		// An entry queue bound: a leader cut off from its quorum stops
		// taking proposals rather than growing without end.
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		// A proposal is stamped by the leader that takes it (above what
		// that leader has applied). Forwarded by a node that has just
		// stepped down, it would reach a leader whose stamps it was never
		// ordered against: raft drops it instead, and the client is told
		// to retry (ServerBusy; nothing was written).
		DisableProposalForwarding: true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		Logger:                    raftLogger{c.Logger},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft of group %d: %w", r.group, err)
	}
	return rn, nil
}

// holdsLease reports whether the replica is its group's leaseholder: the
// ready leader, or a dormant one, which the next request wakes
// (dormant.go).
func (r *replica) holdsLease() bool { return r.ready.Load() || r.dormantLeader.Load() }

// guardingVotes says the replica is still in its first election timeout
// after starting with state: it neither votes nor stands (voteAfter).
func (r *replica) guardingVotes() bool { return r.n.live.ticks < r.voteAfter }

// step hands the replica messages from its peers.
func (r *replica) step(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if m.GetTo() != r.id {
			continue
		}
		// Woken first, if dormant: that starts its guard of votes.
		rn := r.rawNode()
		if m.GetType() == raftpb.MessageType_MsgSnap {
			staged := false
			if r.group == systemGroup {
				staged = r.n.snapshotMessage(m)
			} else {
				staged = r.spanSnapshotMessage(m)
			}
			if !staged {
				continue // stepped once its snapshot is fetched and staged
			}
		}
		if m.GetType() == raftpb.MessageType_MsgVote && r.guardingVotes() && transport.NodeOf(m.GetFrom()) != r.leader.Load() {
			// The leader this replica knew may count on its vote; that
			// leader standing again (a dormant one woken) may have it.
			continue // the candidate tries again; see voteAfter
		}
		// A message of a stale term or for an unknown peer is an error
		// raft reports and ignores; there is nothing to do about it here.
		_ = rn.Step(m)
		if fromLeader(m) {
			r.members.heard = true
		}
		if wakes(m) {
			r.quiesced.Store(false)
		}
	}
}

// send hands a Ready's messages to the transport, but for the commit
// notices a range group's leader holds back (commit_notice.go).
func (r *replica) send(msgs []*raftpb.Message) {
	if msgs = r.holdCommitNotices(msgs); len(msgs) == 0 {
		return
	}
	r.n.sendGroup(r.group, msgs)
	for _, m := range msgs {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			// Sent: the follower fetches the store itself, and answers
			// once it has it.
			r.rawNode().ReportSnapshot(m.GetTo(), raft.SnapshotFinish)
		}
	}
}

// leadershipChanged notes a change of raft role or leader. Becoming the
// leader starts the wait for the entries of earlier terms to be applied
// (the first entry of the term is the empty one raft appends on election,
// the last of rd.Entries); losing it fails the proposals and reads in
// flight, whose fate this node can no longer tell.
func (r *replica) leadershipChanged(ss *raft.SoftState) {
	lead := transport.NodeOf(ss.Lead)
	r.leader.Store(lead)
	r.leaderMu.Lock()
	defer r.leaderMu.Unlock()
	wasLeader := r.isLeader
	r.isLeader = ss.RaftState == raft.StateLeader
	log := r.n.log
	switch {
	case r.isLeader && !wasLeader:
		// handleReadys persisted the Ready's entries, the empty one among
		// them, before calling here.
		last, err := r.rlog.LastIndex()
		if err != nil {
			last = ^uint64(0) // never ready: the log is failing anyway
		}
		r.readyAt = last
		log.Info("cluster: elected leader", "node", r.n.cfg.ID, "group", r.group, "term", r.rawNode().BasicStatus().HardState.GetTerm(), "ready_at", r.readyAt)
	case !r.isLeader && wasLeader:
		r.endHandOver()
		r.dropCommitNotices()
		r.ready.Store(false)
		r.waiters.orphan()
		r.failReads(errNotLeader(lead))
		log.Info("cluster: lost leadership", "node", r.n.cfg.ID, "group", r.group, "leader", lead)
	}
}

// checkReady marks the leader ready once it has applied up to the first
// entry of its term.
func (r *replica) checkReady() {
	r.leaderMu.Lock()
	defer r.leaderMu.Unlock()
	if r.isLeader && !r.ready.Load() && r.applied.Load() >= r.readyAt {
		if r.group == systemGroup && r.n.cfg.OnReady != nil {
			r.n.cfg.OnReady() // before any request is served as the leader
		}
		r.ready.Store(true)
		r.n.log.Info("cluster: leader ready", "node", r.n.cfg.ID, "group", r.group, "applied", r.applied.Load())
	}
}

// stop ends every wait on the replica with err: the node stopped.
func (r *replica) stop(err error) {
	r.ready.Store(false)
	r.waiters.failAll(err)
}
