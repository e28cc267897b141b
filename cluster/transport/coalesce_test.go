package transport

import (
	"fmt"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestLatestHeartbeats(t *testing.T) {
	m := func(group, to uint64, typ raftpb.MessageType, commit uint64) Message {
		return Message{Group: group, Raft: &raftpb.Message{Type: &typ, To: &to, Commit: &commit}}
	}
	hb, app := raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgApp
	show := func(msgs []Message) string {
		s := ""
		for _, x := range msgs {
			s += fmt.Sprintf("%d/%d/%s/%d ", x.Group, x.Raft.GetTo(), x.Raft.GetType().String()[3:], x.Raft.GetCommit())
		}
		return s
	}
	for _, c := range []struct {
		in   []Message
		want string
	}{
		{nil, ""},
		{[]Message{m(5, 2, app, 1), m(5, 2, hb, 1)}, "5/2/App/1 5/2/Heartbeat/1 "},
		// Three heartbeats of group 5 to replica 2: the last stays, where it was.
		{[]Message{m(5, 2, hb, 1), m(5, 2, app, 2), m(6, 2, hb, 3), m(5, 2, hb, 4), m(5, 2, hb, 5), m(5, 2, app, 6)},
			"5/2/App/2 6/2/Heartbeat/3 5/2/Heartbeat/5 5/2/App/6 "},
		// Group 0's (the nodes' liveness messages): every one goes.
		{[]Message{m(0, 2, hb, 1), m(0, 2, hb, 2)}, "0/2/Heartbeat/1 0/2/Heartbeat/2 "},
		// Another replica of the group, or another group: kept.
		{[]Message{m(5, 2, hb, 1), m(5, 3, hb, 2), m(7, 2, hb, 3)}, "5/2/Heartbeat/1 5/3/Heartbeat/2 7/2/Heartbeat/3 "},
	} {
		in := show(c.in)
		if got := show(latestHeartbeats(c.in)); got != c.want {
			t.Errorf("latestHeartbeats(%s) = %s, want %s", in, got, c.want)
		}
	}
}

// TestQueuedHeartbeatsGoOnceEach: heartbeats queued for a peer whose
// stream is down reach it, once it is up, as the latest of each group,
// with everything else queued beside them, in order.
func TestQueuedHeartbeatsGoOnceEach(t *testing.T) {
	a, b := startNode(t, 1), startNode(t, 2)
	defer a.close()
	defer b.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	a.tr.SetPeer(2, dead) // down: everything queues
	heartbeat := func(group, commit uint64) Message {
		return Message{Group: group, Raft: &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(),
			From: proto.Uint64(1), To: proto.Uint64(2), Term: proto.Uint64(3), Commit: proto.Uint64(commit)}}
	}
	for tick := range uint64(10) {
		a.tr.Send([]Message{heartbeat(5, tick), msg(1, 2, tick), heartbeat(6, tick)})
	}
	a.tr.SetPeer(2, b.addr)
	waitFor(t, 5*time.Second, "the queued messages", func() bool { return b.rec.count(1) >= 12 })
	time.Sleep(100 * time.Millisecond) // nothing more comes
	var got []string
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	for _, m := range b.rec.got[1] {
		if m.Raft.GetType() == raftpb.MessageType_MsgHeartbeat {
			got = append(got, fmt.Sprintf("hb%d/%d", m.Group, m.Raft.GetCommit()))
		} else {
			got = append(got, fmt.Sprintf("app%d", m.Raft.GetIndex()))
		}
	}
	want := "[app0 app1 app2 app3 app4 app5 app6 app7 app8 hb5/9 app9 hb6/9]"
	if s := fmt.Sprint(got); s != want {
		t.Fatalf("b received %s, want %s", s, want)
	}
}
