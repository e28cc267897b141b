package raftlog

import (
	"fmt"
	"io"
	"log"
	"slices"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

const raftGroup = 9

// raftNode is one replica of a test raft group: a RawNode on a Log of
// its own, and the commands it applied (the state machine, kept across a
// restart as if its applied index were durable).
type raftNode struct {
	id      uint64
	fs      *vfs.MemFS
	log     *Log
	rn      *raft.RawNode
	applied [][]byte
	index   uint64 // applied index
}

var quietLogger = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

func (n *raftNode) start(t *testing.T) {
	t.Helper()
	n.log = mustOpen(t, testOptions(n.fs, 16))
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              n.id,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         n.log.mustGroup(raftGroup),
		Applied:         n.index,
		MaxSizePerMsg:   1 << 10,
		MaxInflightMsgs: 16,
		Logger:          quietLogger,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.rn = rn
}

// raftCluster passes the messages of its nodes in memory.
type raftCluster struct {
	nodes map[uint64]*raftNode
	down  map[uint64]bool
	queue []*pb.Message
}

// turn runs one loop turn on every running node (persist its Ready in one
// synced Write, queue its messages, apply, Advance), then delivers the
// queued messages to running nodes. It reports whether anything happened.
func (c *raftCluster) turn(t *testing.T) bool {
	t.Helper()
	busy := false
	for _, id := range []uint64{1, 2, 3} {
		n := c.nodes[id]
		if c.down[id] || !n.rn.HasReady() {
			continue
		}
		busy = true
		rd := n.rn.Ready()
		if !raft.IsEmptySnap(rd.Snapshot) {
			t.Fatalf("node %d: a snapshot to apply", id)
		}
		w := n.log.NewWrite()
		w.Append(raftGroup, rd.Entries)
		if !raft.IsEmptyHardState(rd.HardState) {
			w.SetHardState(raftGroup, rd.HardState)
		}
		if err := w.Commit(true); err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		c.queue = append(c.queue, rd.Messages...)
		for _, e := range rd.CommittedEntries {
			if e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
				n.applied = append(n.applied, e.GetData())
			}
			n.index = e.GetIndex()
		}
		n.rn.Advance(rd)
	}
	queue := c.queue
	c.queue = nil
	for _, m := range queue {
		if c.down[m.GetTo()] || c.down[m.GetFrom()] {
			continue
		}
		busy = true
		if err := c.nodes[m.GetTo()].rn.Step(m); err != nil {
			t.Fatalf("node %d: Step(%v): %v", m.GetTo(), m.GetType(), err)
		}
	}
	return busy
}

// settle runs turns until nothing happens.
func (c *raftCluster) settle(t *testing.T) {
	t.Helper()
	for range 1000 {
		if !c.turn(t) {
			return
		}
	}
	t.Fatal("the cluster does not settle")
}

func (c *raftCluster) leader() *raftNode {
	for _, id := range []uint64{1, 2, 3} {
		if !c.down[id] && c.nodes[id].rn.BasicStatus().RaftState == raft.StateLeader {
			return c.nodes[id]
		}
	}
	return nil
}

func (c *raftCluster) propose(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := c.leader().rn.Propose(fmt.Appendf(nil, "command %d", i)); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			c.settle(t)
		}
	}
	c.settle(t)
}

// TestRaftGroup drives a three-node raft group on Logs through an
// election and 100 proposals, stops node 3, commits 20 more without it,
// compacts every log, then restarts node 3 from its Log: it must find its
// log and hard state as they were, and catch up with the others.
func TestRaftGroup(t *testing.T) {
	c := &raftCluster{nodes: map[uint64]*raftNode{}, down: map[uint64]bool{}}
	for _, id := range []uint64{1, 2, 3} {
		n := &raftNode{id: id, fs: vfs.NewMem()}
		l := mustOpen(t, testOptions(n.fs, 16))
		if err := l.mustGroup(raftGroup).Bootstrap(&pb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		n.start(t)
		c.nodes[id] = n
	}
	if err := c.nodes[1].rn.Campaign(); err != nil {
		t.Fatal(err)
	}
	c.settle(t)
	if c.leader() != c.nodes[1] {
		t.Fatal("node 1 did not win the election")
	}
	c.propose(t, 0, 100)
	for _, n := range c.nodes {
		if len(n.applied) != 100 {
			t.Fatalf("node %d applied %d commands, want 100", n.id, len(n.applied))
		}
	}

	// Node 3 goes down; its Log must hold what raft told it to persist.
	n3 := c.nodes[3]
	c.down[3] = true
	hs, _, err := n3.log.mustGroup(raftGroup).InitialState()
	if err != nil {
		t.Fatal(err)
	}
	if st := n3.rn.BasicStatus(); hs.GetTerm() != st.GetTerm() || hs.GetVote() != st.GetVote() || hs.GetCommit() != st.GetCommit() {
		t.Fatalf("node 3 persisted hard state %v, raft has %v", hs, st.HardState)
	}
	before, err := dump(n3.log.mustGroup(raftGroup))
	if err != nil {
		t.Fatal(err)
	}
	if err := n3.log.Close(); err != nil {
		t.Fatal(err)
	}
	c.propose(t, 100, 120)
	// Compact every log below what node 3 has, as the applied index allows.
	for _, id := range []uint64{1, 2} {
		if err := c.nodes[id].log.mustGroup(raftGroup).Compact(90); err != nil {
			t.Fatal(err)
		}
	}

	// Node 3 restarts from its Log.
	n3.start(t)
	after, err := dump(n3.log.mustGroup(raftGroup))
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("node 3 reopened its log as\n%s\nwant\n%s", after, before)
	}
	if err := n3.log.mustGroup(raftGroup).Compact(50); err != nil {
		t.Fatal(err)
	}
	delete(c.down, 3)
	for range 20 {
		for _, n := range c.nodes {
			n.rn.Tick()
		}
		c.settle(t)
	}
	leader := c.leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	want := leader.applied
	if len(want) != 120 {
		t.Fatalf("the leader applied %d commands, want 120", len(want))
	}
	for i, cmd := range want {
		if string(cmd) != fmt.Sprintf("command %d", i) {
			t.Fatalf("command %d is %q", i, cmd)
		}
	}
	lfirst, _ := leader.log.mustGroup(raftGroup).FirstIndex()
	llast, _ := leader.log.mustGroup(raftGroup).LastIndex()
	lents, err := leader.log.mustGroup(raftGroup).Entries(lfirst, llast+1, ^uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		if !slices.EqualFunc(n.applied, want, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("node %d applied %d commands, unlike the leader", n.id, len(n.applied))
		}
		g := n.log.mustGroup(raftGroup)
		if last, _ := g.LastIndex(); last != llast {
			t.Fatalf("node %d: last index %d, the leader's %d", n.id, last, llast)
		}
		ents, err := g.Entries(lfirst, llast+1, ^uint64(0))
		if err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		if !slices.EqualFunc(ents, lents, func(a, b *pb.Entry) bool { return proto.Equal(a, b) }) {
			t.Fatalf("node %d: log %d..%d differs from the leader's", n.id, lfirst, llast)
		}
		hs, _, _ := g.InitialState()
		if hs.GetCommit() != llast {
			t.Fatalf("node %d: persisted commit %d, want %d", n.id, hs.GetCommit(), llast)
		}
	}
	for _, n := range c.nodes {
		n.log.Close()
	}
}
