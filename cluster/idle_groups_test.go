package cluster

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/internal/rusage"
	"github.com/tabuladb/tabula/vfs"
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

// BenchmarkIdleRangeGroups measures what idle range groups cost once they
// have quiesced: three nodes in one process, each hosting every group,
// with the default raft tick (100 ms), the in-memory network of the
// tests. It reports the process's CPU over a quiet window as a share of
// one core per node (core%/node) and the heap per replica (B/group: over
// three times the groups), once every replica is dormant (dormant.go),
// and once every one is unloaded too (unload.go); the plan's target is
// 10,000 idle groups under 5% of a core per node, and memory bounded by
// configuration. The CPU is the whole process's: the tests' network and
// clocks are in it. The heap's growth is counted without the tests'
// in-memory files, which a node keeps on its disk. Setup (elections, then
// quiescence, then unloading) takes a while: run it with -benchtime 1x.
func BenchmarkIdleRangeGroups(b *testing.B) {
	for _, groups := range []int{1_000, 10_000} {
		for _, unload := range []bool{false, true} {
			name := fmt.Sprintf("%d/dormant", groups)
			if unload {
				name = fmt.Sprintf("%d/unloaded", groups)
			}
			b.Run(name, func(b *testing.B) { benchmarkIdleRangeGroups(b, groups, unload) })
		}
	}
}

func benchmarkIdleRangeGroups(b *testing.B, groups int, unload bool) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var prepare func(*testNode)
	if !unload {
		prepare = func(tn *testNode) { tn.node.unloadTicks = -1 }
	}
	c := prepareRangeCluster(b, 3, 1, groups, 100*time.Millisecond, prepare)
	for _, g := range c.groups {
		c.groupLeader(g, 5*time.Minute)
	}
	c.waitQuiesced(5 * time.Minute)
	c.waitDormantBut(groups/100, 5*time.Minute)
	if unload {
		c.waitUnloaded(groups/100, 5*time.Minute)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ResetTimer()
	start, cpu0 := time.Now(), rusage.CPU()
	for range b.N {
		time.Sleep(3 * time.Second)
	}
	wall, cpu := time.Since(start), rusage.CPU()-cpu0
	b.StopTimer()
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds()/3, "core%/node")
	b.ReportMetric(float64(int64(after.HeapAlloc-before.HeapAlloc)-c.diskBytes())/float64(3*groups), "B/group")
	c.waitQuiesced(time.Second) // still quiet: nothing woke them
}

// BenchmarkIdleRangeGroupsAfterWrites: what an idle group holds in
// memory should not grow with what it once served. Each of 100 groups
// takes 100 writes and goes idle; it reports the raft log entries the
// replicas still cache (cached-B/group: the caches are dropped when a
// group quiesces, up to 2 MiB a group otherwise). The process's heap is
// no measure here: the tests' in-memory filesystem holds every file.
func BenchmarkIdleRangeGroupsAfterWrites(b *testing.B) {
	const groups, writes = 100, 100
	c := startRangeCluster(b, 3, 1, groups, 10*time.Millisecond)
	c.createRangesTable()
	for _, g := range c.groups {
		for i := range writes {
			c.writeInGroup(g, "p", fmt.Sprintf("row%04d", i), i)
		}
	}
	c.waitQuiesced(time.Minute)
	var cached int64
	for _, tn := range c.nodes {
		for _, g := range c.groups {
			cached += tn.node.testGroup(g).rlog.CachedBytes()
		}
	}
	for range b.N {
	}
	b.ReportMetric(float64(cached)/float64(3*groups), "cached-B/group")
}

// BenchmarkRestartIdleTables measures what a node holds as it starts
// with idle range groups: three nodes in one process, each a voter of
// every one of 1,000 or 3,000 tables' groups, all unloaded, stopped and started
// again. It reports the heap per replica (B/group: over three times the
// tables) once the restarted cluster's system group has a leader, the
// growth of the nodes' disks (in memory) subtracted: with the replicas started
// unloaded (cold), and as every replica was started before that
// (loaded: the test's knob that turns unloading off loads them at the
// start). Warming is off: it loads a few replicas a tick from the first
// election timeout on.
func BenchmarkRestartIdleTables(b *testing.B) {
	for _, tables := range []int{1_000, 3_000} {
		for _, cold := range []bool{true, false} {
			name := fmt.Sprintf("%d/cold", tables)
			if !cold {
				name = fmt.Sprintf("%d/loaded", tables)
			}
			b.Run(name, func(b *testing.B) { benchmarkRestartIdleTables(b, tables, cold) })
		}
	}
}

func benchmarkRestartIdleTables(b *testing.B, tables int, cold bool) {
	c := idleTablesCluster(b, tables)
	if !cold {
		c.prepare = func(tn *testNode) { tn.node.unloadTicks = -1 }
	}
	var perGroup float64
	var disk int64
	for range b.N {
		disks := map[uint64]*vfs.MemFS{}
		for id, tn := range c.nodes {
			disks[id] = tn.fs
			c.stop(id)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var disksBefore int64
		for _, fs := range disks {
			disksBefore += fs.Bytes()
		}
		for id, fs := range disks {
			c.start(id, fs)
		}
		c.leader(10 * time.Second)
		runtime.GC()
		runtime.ReadMemStats(&after)
		disk = c.diskBytes() - disksBefore
		grown := int64(after.HeapAlloc) - int64(before.HeapAlloc) - disk
		perGroup = float64(grown) / float64(3*tables)
	}
	b.ReportMetric(perGroup, "B/group")
	b.ReportMetric(float64(disk)/float64(3*tables), "disk-B/group")
}

// idleTablesCluster starts three nodes with tables tables, each of a
// group of its own that every node is a voter of, and waits until every
// node has unloaded every replica. The nodes warm no cold record.
func idleTablesCluster(b *testing.B, tables int) *testCluster {
	unloading := func(tn *testNode) { tn.node.unloadTicks, tn.node.noWarming = 3*tn.node.cfg.ElectionTicks, true }
	c := &testCluster{t: b, net: newSimNet(1), nodes: map[uint64]*testNode{}, rangeGroups: true, placementInterval: -1, prepare: unloading}
	c.startAll(3)
	for i := range tables {
		createVia(c, fmt.Sprintf("t%04d", i))
	}
	c.waitAll("every replica unloaded", func(tn *testNode) bool { return tn.node.allUnloaded(tables) })
	return c
}

// BenchmarkRestartWarming measures warming (warm.go) after a restart of
// the whole cluster: three nodes in one process, each a voter of every
// one of 1,000 (and 3,000) tables' groups, all unloaded, stopped and started again
// with warming on. It reports the time until every node's records know
// every group's leader (warm-s), and the most range replicas any node
// held loaded at once meanwhile (peak-loaded), which warming bounds by
// its rate and the unload wait (three election timeouts here), not by
// the number of groups.
func BenchmarkRestartWarming(b *testing.B) {
	for _, tables := range []int{1_000, 3_000} {
		b.Run(fmt.Sprint(tables), func(b *testing.B) { benchmarkRestartWarming(b, tables) })
	}
}

func benchmarkRestartWarming(b *testing.B, tables int) {
	c := idleTablesCluster(b, tables)
	c.prepare = func(tn *testNode) { tn.node.unloadTicks = 3 * tn.node.cfg.ElectionTicks }
	var took time.Duration
	peak := 0
	for range b.N {
		c.restartAll()
		start := time.Now()
		for {
			warm := true
			for _, tn := range c.nodes {
				peak = max(peak, tn.node.rangeReplicasLoaded())
				for _, g := range tn.node.groupStatus() {
					warm = warm && g.Leader != 0
				}
			}
			if warm {
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatal("not every group warmed in 5 minutes")
			}
			time.Sleep(10 * time.Millisecond)
		}
		took = time.Since(start)
	}
	b.ReportMetric(took.Seconds(), "warm-s")
	b.ReportMetric(float64(peak), "peak-loaded")
}

// diskBytes is the memory the nodes' in-memory disks take.
func (c *testCluster) diskBytes() int64 {
	var n int64
	for _, tn := range c.nodes {
		n += tn.fs.Bytes()
	}
	return n
}
