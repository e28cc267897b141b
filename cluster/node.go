package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/tabuladb/tabula/cluster/transport"
	"github.com/tabuladb/tabula/partition"
)

// systemGroup is the raft group that replicates the table service as a
// whole: the catalog, and every entity not in a range group. The log, the
// messages on the wire and the store's applied index carry a group id, so
// range partitions become groups of their own beside it (replica.go).
const systemGroup = 1

// Transport sends raft messages to the other nodes (package
// cluster/transport over the network; an in-memory one in tests).
type Transport interface {
	// Send queues messages for their recipients (m.Raft.To) without
	// blocking.
	Send(msgs []transport.Message)
	// Unreachable returns the peers whose messages failed to go out since
	// the last call: raft then stops streaming appends to them until they
	// answer again (ReportUnreachable).
	Unreachable() []uint64
}

// Node is one machine's member of a cluster: it holds a replica of each
// raft group it belongs to, drives them all from one loop (one write of
// the raft log, so one fsync, per turn for every group), exchanges their
// messages over one transport and applies their committed commands to its
// one store. Store (the type) is its face to the REST server.
type Node struct {
	// The system group's replica. Membership, snapshots and status are
	// the system group's, and read its fields as the node's own.
	*replica

	cfg   Config
	log   *slog.Logger
	store atomic.Pointer[partition.Store] // see st

	// replicas are the node's groups by id, the system group's included;
	// the loop adds them, others read under replicasMu. touched are the
	// replicas the loop turn under way has given work (loop-owned).
	replicasMu  sync.RWMutex
	replicas    map[uint64]*replica
	replicaList []*replica // the same, to tick in a loop cheaper than a map's
	touched     map[*replica]struct{}
	// unloadedCount counts the range groups hosted here whose replicas
	// were unloaded (unload.go), whose records are in the raft log's
	// engine (unload_record.go): the loop changes them, and the apply
	// goroutine marks them (markMoving), under replicasMu.
	unloadedCount int
	// replicasPeak is the most replicas the node held since the map was
	// last made again (shrink.Map; under replicasMu).
	replicasPeak int
	// unloadedLeaders counts the dormant leaders among them (loop-owned).
	unloadedLeaders int
	// names are the groups whose voters were named within the placement
	// controller's settle window (recent_names.go).
	names recentNames
	// toWarm are the cold records this node is to warm, in turn, and
	// warm where it is in that (warmCold; loop-owned).
	toWarm []uint64
	warm   warmState

	// dir is the node's data directory; storePtr names the live store in
	// it (owned by the apply goroutine, which installs snapshots).
	dir      *storeDir
	storePtr storePointer
	snaps    snapshots
	members  members

	// removed is set when a change removes this node from the system
	// group (its configuration is the embedded replica's conf).
	removed       atomic.Bool
	memberReqs    chan memberRequest
	calls         chan func() // work for the loop from other goroutines
	lastPromotion time.Time   // loop-owned

	inbox     chan []transport.Message
	proposes  chan *proposal
	gather    *proposalGather // when the loop proposes (gather.go)
	reads     chan *readWaiter
	applyCh   chan applyItem
	ingests   ingestGate    // span snapshot ingests under way (span_install.go)
	spanFiles atomic.Uint64 // names the span snapshots fetched (spanFile)
	// readRounds counts the ReadIndex rounds asked of raft (the reads a
	// lease did not answer, and the lease's renewals).
	readRounds atomic.Uint64
	// dormantWakes counts the replicas woken from dormancy (dormant.go),
	// replicaLoads the unloaded ones loaded again (unload.go).
	dormantWakes, replicaLoads atomic.Uint64

	// catchUpSeq numbers the replicas' catch-up questions (catch_up.go);
	// splitWaits are the split children that wait on one to be hosted
	// (splitPending), orphanWaits the orphans that wait on one to be
	// dropped (dropOrphan), catalogWaits the range groups led here whose
	// split waits on the system group's (catalogCaughtUp). Loop-owned.
	catchUpSeq              uint64
	splitWaits, orphanWaits catchUpWaits
	catalogWaits            map[uint64]catalogWait

	// heldNotices are the range group leaders that hold commit notices
	// back until the next tick (commit_notice.go; loop-owned).
	heldNotices []*replica

	hosts  hostQueue                  // range groups to start or drop
	status atomic.Pointer[nodeStatus] // see snapshotStatus
	live   liveness                   // loop-owned
	// tickCount is live.ticks, for the request goroutines (leaseCovers).
	tickCount atomic.Uint64

	stopped chan struct{}
	failed  atomic.Pointer[error]

	// afterApplyEntry, set by tests before Run, is called on the apply
	// goroutine once a command is applied to the store and before the
	// replica records its index as applied.
	afterApplyEntry func(group, index uint64)
	// afterSpanIngest, set by tests before Run, is called on the apply
	// goroutine once a span snapshot is in the store and before the raft
	// log records it.
	afterSpanIngest func(group uint64)
	// beforeSpanIngest, set by tests before Run, is called on an ingest's
	// goroutine before the span snapshot is written into the store.
	beforeSpanIngest func(group uint64)
	// ignoreMergeRecords, set by tests on the loop, makes the node read
	// no span record's merged groups (mergedHere), as if its snapshots
	// were made before records listed them: the tests of what finds a
	// leftover without them.
	ignoreMergeRecords bool
	// busyLeaseTicks, set by tests before Run, replaces the ticks between
	// two hand-overs of busy leases (lease.go; 0: the default), and
	// onBusyHandOver is called on the loop as one is handed over.
	busyLeaseTicks uint64
	// dozeTicks, set by tests before Run, replaces the ticks a follower
	// stays quiesced before it drops its raft state (dormant.go; 0: the
	// default).
	dozeTicks int
	// unloadTicks, set by tests before Run, replaces the ticks a dormant
	// replica waits before it is unloaded (unload.go; 0: the default, -1:
	// never).
	unloadTicks int
	// noWarming, set by tests before Run, keeps the node from warming
	// cold records (warmCold).
	noWarming      bool
	onBusyHandOver func(group uint64)
}

// ErrStopped is returned to requests once the node has stopped.
var ErrStopped = errors.New("cluster: node stopped")

// NewNode prepares a node: it opens (or bootstraps) its raft state from
// the log, replays nothing yet, and starts no goroutine; Run does.
func NewNode(cfg Config) (*Node, error) {
	c := cfg.withDefaults()
	if c.ID == 0 || c.Store == nil || c.DataDir == "" || c.Log == nil || c.Transport == nil {
		return nil, errors.New("cluster: a node needs an ID, a store and its data directory, a log and a transport")
	}
	for id, addr := range c.Members {
		if err := checkAddress(addr); err != nil {
			return nil, fmt.Errorf("cluster: member %d: %w", id, err)
		}
	}
	dir := newStoreDir(c.DataDir, c.StoreOptions)
	ptr, err := dir.readPointer()
	if err != nil {
		return nil, err
	}
	st, err := c.Log.Group(systemGroup)
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	hs, cs, err := st.InitialState()
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	fresh := len(cs.GetVoters()) == 0 && raft.IsEmptyHardState(hs) // see replica.voteAfter
	if fresh && !c.Join {
		if len(c.Peers) == 0 {
			return nil, errors.New("cluster: a new group needs its peers")
		}
		if err := st.Bootstrap(&raftpb.ConfState{Voters: c.Peers}); err != nil {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
		cs = &raftpb.ConfState{Voters: c.Peers}
	}
	book, err := loadMembers(dir.fs, c.DataDir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", membersFile, err)
	}
	applied, err := c.Store.AppliedIndex(systemGroup)
	if err != nil {
		return nil, err
	}
	if applied > hs.GetCommit() {
		// raft does not sync its hard state for a commit index alone, so
		// after a crash the log may remember less committed than the store
		// applied. Applied entries were committed, and are in the log
		// (entries are synced before they can commit): say so.
		last, err := st.LastIndex()
		if err != nil {
			return nil, fmt.Errorf("cluster: read raft log: %w", err)
		}
		w := c.Log.NewWrite()
		if applied > last || snapshotUnrecorded(st, ptr, applied) {
			// Only a snapshot takes the store past the log: the node
			// switched to a restored store and crashed before its log
			// recorded the snapshot. Record it now (snapshotUnrecorded).
			if ptr.snap == nil || ptr.snap.GetIndex() != applied {
				return nil, fmt.Errorf("cluster: the store applied entry %d, past the raft log's last, %d: the log was lost or belongs to another store", applied, last)
			}
			w.ApplySnapshot(systemGroup, ptr.snap)
		}
		fixed := &raftpb.HardState{Term: hs.Term, Vote: hs.Vote, Commit: &applied}
		w.SetHardState(systemGroup, fixed)
		if err := w.Commit(true); err != nil {
			return nil, fmt.Errorf("cluster: record commit index: %w", err)
		}
	}
	gs := &groupStorage{Storage: st}
	n := &Node{
		cfg:        c,
		log:        c.Logger,
		dir:        dir,
		storePtr:   ptr,
		replicas:   make(map[uint64]*replica),
		names:      recentNames{window: max(0, settleRounds*c.PlacementInterval)},
		touched:    make(map[*replica]struct{}),
		splitWaits: catchUpWaits{}, orphanWaits: catchUpWaits{}, catalogWaits: map[uint64]catalogWait{},
		live: liveness{heard: make(map[uint64]uint64), notices: make(map[uint64][]byte), silent: make(map[uint64]bool),
			incarnation: rand.Uint64() | 1, runs: make(map[uint64]uint64), checks: memberNotes{}, removed: memberNotes{},
			mergeChecks: memberNotes{}, frozenHere: memberNotes{}, merged: memberNotes{}, frozen: map[uint64]map[uint64]uint64{}, mergeHints: map[uint64]mergeHint{},
			leases: make(map[uint64]uint64), loads: make(map[uint64]uint64)},
		inbox:    make(chan []transport.Message, 1024),
		proposes: make(chan *proposal, 1024),
		gather:   newProposalGather(),
		reads:    make(chan *readWaiter, 1024),
		applyCh:  make(chan applyItem, 64),
		stopped:  make(chan struct{}),
	}
	gs.snapshot = n.leaderSnapshot
	n.ingests.init()
	if n.replica, err = newReplica(n, systemGroup, c.ID, st, gs, applied, fresh, false); err != nil {
		return nil, err
	}
	n.replicas[systemGroup] = n.replica
	n.replicaList = append(n.replicaList, n.replica)
	n.memberReqs = make(chan memberRequest, 16)
	n.calls = make(chan func(), 16)
	if err := n.initMembers(book, cs); err != nil {
		return nil, err
	}
	n.store.Store(c.Store)
	n.snaps.served = map[string]*servedSnapshot{}
	n.snaps.nextDir = ptr.n
	n.snaps.keep = c.SnapshotKeep
	n.hosts.wake = make(chan struct{}, 1)
	if err := removeSpanFiles(dir.fs, c.DataDir); err != nil {
		return nil, fmt.Errorf("cluster: remove fetched span snapshots: %w", err)
	}
	if err := n.hostTableGroups(); err != nil {
		return nil, err
	}
	return n, nil
}

// Replica returns the node's store open now: Config.Store, or the store a
// snapshot install put in its place. Once Run has returned, it is the one
// the node's owner closes.
func (n *Node) Replica() *partition.Store { return n.st() }

// Receive hands the node messages from another node. It never blocks: a
// node too busy to take them drops them, and raft sends them again.
// Messages of a group the node does not hold are dropped too.
func (n *Node) Receive(msgs []transport.Message) {
	if len(msgs) == 0 {
		return
	}
	select {
	case n.inbox <- msgs:
	default:
	}
}

// route hands received messages to the replicas of their groups, and
// notes their senders alive. Group 0 is the nodes' own: liveness, and
// the groups the sender quiesced (quiesce.go).
func (n *Node) route(msgs []transport.Message) error {
	for _, m := range msgs {
		n.live.heard[transport.NodeOf(m.Raft.GetFrom())] = n.live.ticks
	}
	for i := 0; i < len(msgs); {
		if msgs[i].Group == 0 {
			n.heardLiveness(msgs[i].Raft)
			i++
			continue
		}
		g := msgs[i].Group
		j := i + 1
		for j < len(msgs) && msgs[j].Group == g {
			j++
		}
		r := n.replicaOf(g)
		if to := msgs[i].Raft.GetTo(); g != systemGroup && (r == nil || r.id != to) {
			// A member this node does not host yet, or a newer one than
			// it hosts (range_members.go).
			var err error
			if r, err = n.hostMember(g, to); err != nil {
				return err
			}
		}
		if r != nil {
			batch := make([]*raftpb.Message, j-i)
			for k := range batch {
				batch[k] = msgs[i+k].Raft
				if r.group != systemGroup && !hasMember(r.conf, batch[k].GetFrom()) {
					r.strayFrom(batch[k].GetFrom())
				}
			}
			r.step(batch)
			n.touch(r)
		}
		i = j
	}
	return nil
}

// deliver queues a group's messages for the loop, as Receive does (a
// follower's MsgSnap, once its snapshot is fetched).
func (n *Node) deliver(group uint64, msgs []*raftpb.Message) {
	out := make([]transport.Message, len(msgs))
	for i, m := range msgs {
		out[i] = transport.Message{Group: group, Raft: m}
	}
	n.Receive(out)
}

// touch marks r as given work in this loop turn: its Ready is looked at.
// A replica the node no longer hosts (retired, or its table dropped, with
// a proposal or read for it still queued) has no Ready handled again: its
// raft log is gone.
func (n *Node) touch(r *replica) {
	if n.replicas[r.group] == r {
		n.touched[r] = struct{}{}
	}
}

// Leader returns the id of the group's leader as this node knows it, 0
// when it knows none.
func (n *Node) Leader() uint64 { return n.leader.Load() }

// IsLeader reports whether this node is the leader and may answer for the
// group: it has applied everything committed before its term.
func (n *Node) IsLeader() bool { return n.ready.Load() }

// Err returns the failure that stopped the node, if one did.
func (n *Node) Err() error {
	if p := n.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Run drives the node until ctx ends or a storage failure stops it (a log
// write that failed cannot be retried: raft may have promised it). It
// returns ctx's error or the failure.
func (n *Node) Run(ctx context.Context) error {
	// Here rather than at NewNode: every group hosted before Run is.
	if err := n.deleteMergedLogs(); err != nil {
		return err
	}
	if n.unloadWait() < 0 {
		// Replicas are never unloaded (a test's knob, set after NewNode):
		// not even at the start.
		n.loadWhere(func(_ uint64, u unloadedReplica) bool { return u.cold })
		if err := n.Err(); err != nil {
			return err
		}
	}
	applyDone := make(chan struct{})
	go func() {
		defer close(applyDone)
		n.applyLoop()
	}()
	placementDone := make(chan struct{})
	go func() {
		defer close(placementDone)
		n.runPlacement()
	}()
	err := n.loop(ctx)
	close(n.applyCh)
	<-applyDone
	n.ingests.wg.Wait()
	n.closeSnapshots()
	if err != nil && !errors.Is(err, context.Canceled) {
		n.failed.CompareAndSwap(nil, &err)
		n.log.Error("cluster node stopped", "err", err)
	}
	close(n.stopped)
	<-placementDone
	n.replicasMu.RLock()
	for _, r := range n.replicas {
		r.stop(errStoppedUnwritten) // to those raft never took
	}
	n.replicasMu.RUnlock()
	return err
}

func (n *Node) loop(ctx context.Context) error {
	ticks := n.cfg.Ticks
	if ticks == nil {
		ticker := time.NewTicker(n.cfg.TickInterval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	var pendingReads []*readWaiter
	var proposals []*proposal
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.gather.wake():
			n.gather.fired()
		case <-ticks:
			n.sendCommitNotices()
			n.tickReplicas(n.cfg.Transport.Unreachable())
			n.balanceLeases()
			n.promoteLearners()
			n.snapshotStatus()
		case r := <-n.memberReqs:
			n.handleMemberRequest(r)
			n.touch(n.replica)
		case f := <-n.calls:
			f()
		case <-n.ingests.wake:
			if err := n.finishSpanInstalls(); err != nil {
				return err
			}
		case <-n.hosts.wake:
			if err := n.applyHostChanges(); err != nil {
				return err
			}
		case msgs := <-n.inbox:
			if err := n.route(msgs); err != nil {
				return err
			}
		case p := <-n.proposes:
			proposals = append(proposals, p)
		case r := <-n.reads:
			pendingReads = append(pendingReads, r)
		}
		// Take whatever else is queued before the next Ready, so one turn
		// carries many proposals and messages: one log write, one fsync.
		for more := true; more; {
			select {
			case msgs := <-n.inbox:
				if err := n.route(msgs); err != nil {
					return err
				}
			case p := <-n.proposes:
				proposals = append(proposals, p)
			case r := <-n.reads:
				pendingReads = append(pendingReads, r)
			default:
				more = false
			}
		}
		if len(proposals) > 0 {
			if d := n.gather.hold(len(proposals), time.Now()); d > 0 {
				n.gather.arm(d)
			} else {
				n.gather.proposed()
				proposals = n.proposeAll(proposals)
			}
		}
		if len(pendingReads) > 0 {
			n.requestReads(pendingReads)
			pendingReads = nil
		}
		if err := n.handleTouched(); err != nil {
			return err
		}
		if err := n.Err(); err != nil {
			return err // the apply goroutine failed
		}
		if n.removed.Load() {
			return ErrRemoved
		}
	}
}

// callOnLoop runs f on n's loop, for a request's goroutine, and returns what
// it returns: ctx's error if ctx ends first, ErrStopped if the node stops.
func callOnLoop[T any](ctx context.Context, n *Node, f func() T) (T, error) {
	var zero T
	out := make(chan T, 1)
	select {
	case n.calls <- func() { out <- f() }:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-n.stopped:
		return zero, ErrStopped
	}
	select {
	case v := <-out:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-n.stopped:
		return zero, ErrStopped
	}
}
