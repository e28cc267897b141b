package cluster

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestRestartedPeerCountsAsBack feeds a node liveness messages from a
// peer that restarted between two ticks (a new run, never silent): the
// next tick must report it back, as after a silence, so that the
// quiesced leaders it is a voter of wake and bring it what it missed.
func TestRestartedPeerCountsAsBack(t *testing.T) {
	c := newTestCluster(t, 3, 42)
	tn := c.leader(10 * time.Second)
	liveness := func(run uint64) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(2), To: proto.Uint64(tn.id), Commit: proto.Uint64(run)}
	}
	onLoop := func(f func()) {
		done := make(chan struct{})
		tn.node.calls <- func() { f(); close(done) }
		<-done
	}
	var back []uint64
	onLoop(func() {
		n := tn.node
		n.heardLiveness(liveness(7))
		n.live.heard[2] = n.live.ticks
		n.livenessChanged()
		n.heardLiveness(liveness(7)) // the same run: nothing changed
		_, back = n.livenessChanged()
	})
	if len(back) != 0 {
		t.Fatalf("a peer heard again in the same run is reported back: %v", back)
	}
	onLoop(func() {
		n := tn.node
		n.heardLiveness(liveness(9)) // a new run
		n.live.heard[2] = n.live.ticks
		_, back = n.livenessChanged()
	})
	if len(back) != 1 || back[0] != 2 {
		t.Fatalf("a restarted peer: back = %v, want [2]", back)
	}
}
