package cluster

import (
	"log/slog"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkIdleGroupTick measures what one idle raft group costs when it
// is ticked as Node ticks its group today (a heartbeat every tick): raft
// alone, three replicas in one process, messages handed over in memory,
// no log write (an idle group's hard state does not change), no framing
// and no network. It is the floor under the plan's target of 10,000 idle
// range groups under 5% of a core per node (docs/cluster.md, "Range
// partitions as groups"): ns/tick is the cost of one tick of one group on
// all three replicas, and core%@10k the share of one core that 10,000 such
// groups ticked every 100 ms take on each of three nodes. A figure above
// the target means idle groups must quiesce (not be ticked at all), not
// merely be ticked more cheaply.
func BenchmarkIdleGroupTick(b *testing.B) {
	const groups, replicas = 200, 3
	type member struct {
		rn      *raft.RawNode
		storage *raft.MemoryStorage
	}
	fleet := make([][replicas]member, groups)
	peers := []uint64{1, 2, 3}
	for g := range fleet {
		for r := range replicas {
			st := raft.NewMemoryStorage()
			if err := st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
				ConfState: &raftpb.ConfState{Voters: peers}, Index: proto.Uint64(1), Term: proto.Uint64(1),
			}}); err != nil {
				b.Fatal(err)
			}
			rn, err := raft.NewRawNode(&raft.Config{
				ID: uint64(r + 1), ElectionTick: 10, HeartbeatTick: 1, Storage: st,
				MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true,
				Logger: raftLogger{slog.New(slog.DiscardHandler)},
			})
			if err != nil {
				b.Fatal(err)
			}
			fleet[g][r] = member{rn, st}
		}
	}
	// pump handles every Ready of a group until none is left, delivering
	// its messages to the other replicas.
	pump := func(g int) {
		for busy := true; busy; {
			busy = false
			for r := range replicas {
				m := fleet[g][r]
				if !m.rn.HasReady() {
					continue
				}
				busy = true
				rd := m.rn.Ready()
				if !raft.IsEmptyHardState(rd.HardState) {
					m.storage.SetHardState(rd.HardState)
				}
				m.storage.Append(rd.Entries)
				for _, msg := range rd.Messages {
					if err := fleet[g][msg.GetTo()-1].rn.Step(msg); err != nil {
						b.Fatal(err)
					}
				}
				m.rn.Advance(rd)
			}
		}
	}
	for g := range fleet {
		if err := fleet[g][0].rn.Campaign(); err != nil {
			b.Fatal(err)
		}
		pump(g)
		if st := fleet[g][0].rn.Status(); st.RaftState != raft.StateLeader {
			b.Fatalf("group %d: replica 1 is %v after its campaign", g, st.RaftState)
		}
	}
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		for g := range fleet {
			for r := range replicas {
				fleet[g][r].rn.Tick()
			}
			pump(g)
		}
	}
	b.StopTimer()
	perTick := float64(time.Since(start).Nanoseconds()) / float64(b.N*groups)
	b.ReportMetric(perTick, "ns/tick")
	// Per node: a third of the three replicas' cost, ten ticks a second.
	b.ReportMetric(perTick/3*10_000*10/1e9*100, "core%@10k")
	for g := range fleet {
		if st := fleet[g][0].rn.Status(); st.RaftState != raft.StateLeader {
			b.Fatalf("group %d lost its leader while idle", g)
		}
	}
}
