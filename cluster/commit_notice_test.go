package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/transport"
)

// sentLog is a Transport that keeps what it is given.
type sentLog struct{ sent []transport.Message }

func (s *sentLog) Send(msgs []transport.Message) { s.sent = append(s.sent, msgs...) }
func (s *sentLog) Unreachable() []uint64         { return nil }

func appendTo(to uint64, commit uint64, entries int) *raftpb.Message {
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(to), Commit: proto.Uint64(commit)}
	for range entries {
		m.Entries = append(m.Entries, &raftpb.Entry{})
	}
	return m
}

// describeSent names the messages sent as group/type/to/commit.
func describeSent(msgs []transport.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, fmt.Sprintf("%d/%s/%d/%d", m.Group, m.Raft.GetType(), m.Raft.GetTo(), m.Raft.GetCommit()))
	}
	slices.Sort(out)
	return out
}

// TestCommitNoticesWaitForAnAppendOrATick: a range group's leader holds
// its appends without entries back; an append with entries to the same
// member makes the held one moot; the rest goes out at the tick, but not
// for a replica no longer hosted, nor once dropped (quiesced, or no
// longer the leader). The system group's go out at once.
func TestCommitNoticesWaitForAnAppendOrATick(t *testing.T) {
	sent := &sentLog{}
	n := &Node{cfg: Config{Transport: sent}, replicas: map[uint64]*replica{}}
	r := &replica{n: n, group: 2}
	gone := &replica{n: n, group: 3}
	sys := &replica{n: n, group: systemGroup}
	n.replicas[2], n.replicas[systemGroup] = r, sys

	hb := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(2), Commit: proto.Uint64(5)}
	r.send([]*raftpb.Message{appendTo(2, 5, 0), appendTo(3, 5, 2), hb})
	if got, want := describeSent(sent.sent), []string{"2/MsgApp/3/5", "2/MsgHeartbeat/2/5"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v: the notice to member 2 held", got, want)
	}
	sent.sent = nil
	r.send([]*raftpb.Message{appendTo(3, 6, 0)})
	r.send([]*raftpb.Message{appendTo(2, 7, 1)}) // carries commit 7: the notice of 5 is moot
	gone.send([]*raftpb.Message{appendTo(2, 7, 0)})
	sys.send([]*raftpb.Message{appendTo(2, 7, 0)})
	if got, want := describeSent(sent.sent), []string{"1/MsgApp/2/7", "2/MsgApp/2/7"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	sent.sent = nil
	n.sendCommitNotices()
	if got, want := describeSent(sent.sent), []string{"2/MsgApp/3/6"}; !slices.Equal(got, want) {
		t.Fatalf("at the tick sent %v, want %v (none of a group no longer hosted)", got, want)
	}
	if len(n.heldNotices) != 0 || len(r.notices.held) != 0 {
		t.Fatalf("after the tick %d replicas listed, %d notices held", len(n.heldNotices), len(r.notices.held))
	}
	sent.sent = nil
	r.send([]*raftpb.Message{appendTo(3, 8, 0)})
	r.dropCommitNotices()
	n.sendCommitNotices()
	if len(sent.sent) != 0 {
		t.Fatalf("dropped notices were sent: %v", describeSent(sent.sent))
	}
}

// TestFollowersApplyHeldCommits writes to a range group, one write after
// another (every answer commits an entry, and raft has a notice for
// each follower), then stops: every follower applies every write, from
// the next append or the notices sent at a tick, and the group quiesces
// with its followers caught up.
func TestFollowersApplyHeldCommits(t *testing.T) {
	c := newRangeCluster(t, 3, 7, 1)
	c.createRangesTable()
	const g = 2
	for i := range 30 {
		c.writeInGroup(g, fmt.Sprintf("p%02d", i), "r", i)
	}
	c.waitQuiesced(10 * time.Second)
	want := c.groupLeader(g, 10*time.Second).node.testGroup(g).applied.Load()
	for _, tn := range c.nodes {
		if got := tn.node.testGroup(g).applied.Load(); got != want {
			t.Errorf("node %d applied %d of group %d, quiesced; the leader %d", tn.id, got, g, want)
		}
	}
	for i := range 30 {
		if e := c.readInGroup(g, fmt.Sprintf("p%02d", i), "r"); entityN(t, e) != i {
			t.Fatalf("p%02d = %+v, want N=%d", i, e, i)
		}
	}
}
