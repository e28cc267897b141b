package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

var (
	chaosSeeds = flag.Int("chaos-seeds", 2, "seeds TestChaos runs (each about chaos-duration)")
	chaosSeed  = flag.Uint64("chaos-seed", 0, "run this one seed of TestChaos (0: seeds 1..chaos-seeds)")
	chaosTime  = flag.Duration("chaos-duration", 1500*time.Millisecond, "how long each TestChaos seed runs its workload")
)

// chaosOp is one client operation on a register (an entity of partition
// "r" with RowKey its key) or on the pair (two entities of partition
// "pair" that every batch writes together).
type chaosOp struct {
	Kind string // get, put, insert, delete, pairput, pairget
	Key  int
	N    int
}

// chaosOut is what the client saw: the outcome and the value read.
type chaosOut struct {
	Outcome string // ok, notfound, exists, unknown (a write whose fate the node could not tell)
	N       int
}

// chaosModel is a register per key; a write of unknown outcome is given
// the end of time as its return, so it may take effect at any point after
// its call, or (linearized last) never be seen.
var chaosModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(chaosOp).Key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return -1 },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(int), input.(chaosOp), output.(chaosOut)
		if out.Outcome == "unknown" {
			switch in.Kind {
			case "put", "pairput":
				return true, in.N
			case "insert":
				if s == -1 {
					return true, in.N
				}
				return true, s
			case "delete":
				return true, -1
			}
		}
		switch in.Kind {
		case "get", "pairget":
			if s == -1 {
				return out.Outcome == "notfound", s
			}
			return out.Outcome == "ok" && out.N == s, s
		case "put", "pairput":
			return out.Outcome == "ok", in.N
		case "insert":
			if s == -1 {
				return out.Outcome == "ok", in.N
			}
			return out.Outcome == "exists", s
		case "delete":
			if s == -1 {
				return out.Outcome == "notfound", s
			}
			return out.Outcome == "ok", -1
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
}

// TestChaos runs clients against a three-node cluster while nodes lose
// power and restart, links are cut and healed and messages are dropped
// and delayed, all chosen by a seeded generator; then checks that the
// history is linearizable register by register, that no read ever saw a
// batch half applied, that one entity's timestamps grew with real time,
// and that every replica ends byte for byte alike. A failing seed is
// printed; -chaos-seed reruns it (the fault schedule and the operations
// follow the seed; goroutine timing does not). -chaos-seeds runs more.
func TestChaos(t *testing.T) {
	seeds := []uint64{}
	if *chaosSeed != 0 {
		seeds = append(seeds, *chaosSeed)
	} else {
		for s := 1; s <= *chaosSeeds; s++ {
			seeds = append(seeds, uint64(s))
		}
	}
	for _, seed := range seeds {
		for _, mode := range []chaosMode{chaosSystem, chaosRanges, chaosMoves, chaosMerges} {
			t.Run(fmt.Sprintf("seed%d%s", seed, mode), func(t *testing.T) {
				runChaos(t, seed, *chaosTime, mode)
			})
		}
	}
}

// chaosMode is what a chaos run replicates the table with.
type chaosMode string

const (
	chaosSystem chaosMode = ""              // the system group, 3 nodes
	chaosRanges chaosMode = "-range-groups" // a range group of its own, 3 nodes
	// a range group on 3 of 4 nodes, which the faults also move: the
	// table's voters are named anew now and then, the table splits, and
	// its ranges' leases are handed over
	chaosMoves chaosMode = "-moves"
	// the moves, and besides every other fault a second roll that splits
	// the table or merges it back (most moves runs end before a merge:
	// its ranges must first sit on the same nodes)
	chaosMerges chaosMode = "-merges"
)

// runChaos runs one seed; with a range group, the table's leader is the
// group's, which the faults aim at.
func runChaos(t *testing.T, seed uint64, dur time.Duration, mode chaosMode) {
	ranges, moves, reshapes := mode != chaosSystem, mode == chaosMoves || mode == chaosMerges, mode == chaosMerges
	size := 3
	if moves {
		size = 4
	}
	var c *testCluster
	if ranges {
		// The faults name the moves; a placement controller moving
		// groups too would move them under the final check.
		c = &testCluster{t: t, net: newSimNet(seed), nodes: map[uint64]*testNode{}, rangeGroups: true, placementInterval: -1}
		// Replicas, leaders too, go dormant after one quiet tick and
		// leave memory after three, so that the faults find many of
		// them waking and loading.
		c.prepare = func(tn *testNode) { tn.node.dozeTicks, tn.node.unloadTicks = 1, 3 }
		c.startAll(size)
	} else {
		c = newTestCluster(t, size, seed)
	}
	c.net.setFaults(0.05, 3*time.Millisecond)
	ctx := context.Background()
	createVia(c, "chaos")
	// leads says whether a node answers for the table's entities.
	leads := func(tn *testNode) bool { return tn.node.IsLeader() }
	var group uint64
	if ranges {
		group = c.tableGroup("chaos").ID
		leads = func(tn *testNode) bool { r := tn.node.testGroup(group); return r != nil && r.holdsLease() }
	}

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		stamps  = map[int][]stamped{} // acknowledged writes per key, for the timestamp check
		nodesMu sync.Mutex            // guards c.nodes against the fault injector
	)
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for client := range 4 {
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		wg.Go(func() {
			for n := client * 1_000_000; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				op := chaosOp{Key: rng.IntN(3), N: n}
				switch r := rng.IntN(10); {
				case r < 3:
					op.Kind = "get"
				case r < 5:
					op.Kind = "put"
				case r < 6:
					op.Kind = "insert"
				case r < 7:
					op.Kind = "delete"
				case r < 8:
					op.Kind, op.Key = "pairput", 100
				default:
					op.Kind, op.Key = "pairget", 100
				}
				nodesMu.Lock()
				var s *Store
				if len(c.nodes) > 0 {
					ids := make([]uint64, 0, len(c.nodes))
					for id := range c.nodes {
						ids = append(ids, id)
					}
					sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
					s = c.nodes[ids[rng.IntN(len(ids))]].node.Store()
				}
				nodesMu.Unlock()
				if s == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				call := time.Since(start).Nanoseconds()
				out, ts, err := runChaosOp(ctx, s, op)
				ret := time.Since(start).Nanoseconds()
				if err != nil {
					t.Errorf("seed %d: %+v: %v", seed, op, err)
					return
				}
				if out.Outcome == "refused" {
					time.Sleep(time.Millisecond) // not the leader: nothing happened
					continue
				}
				if out.Outcome == "unknown" {
					ret = 1 << 62
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: op, Call: call, Output: out, Return: ret})
				if ts != 0 {
					stamps[op.Key] = append(stamps[op.Key], stamped{call: call, ret: ret, ts: ts})
				}
				mu.Unlock()
			}
		})
	}

	// The fault injector: every few milliseconds, one change.
	frng := rand.New(rand.NewPCG(seed, 0xfa17))
	movesNamed, handOvers, leasesAsked, merges := 0, 0, 0, 0
	var transfers sync.WaitGroup
	down := map[uint64]bool{}
	// reshape splits the table between its two partitions, or merges it
	// back once split (moving the right range's group to the left's nodes
	// first), and has a range's leader hand its lease to another voter.
	reshape := func() {
		merge := frng.IntN(2) == 0
		nodesMu.Lock()
		for _, tn := range c.nodes {
			if !tn.node.IsLeader() {
				continue
			}
			ranges, err := tn.node.st().TableRanges(acct, "chaos")
			switch {
			case err == nil && len(ranges) > 1 && merge && !sameNodes(ranges[0].Group.Voters, ranges[1].Group.Voters):
				// The right range's group goes to the left's nodes first.
				if tn.node.SetGroupVoters(ctx, ranges[1].Group.ID, ranges[0].Group.Voters) == nil {
					movesNamed++
				}
			case err == nil && len(ranges) > 1 && merge:
				if tn.node.MergeTable(ctx, acct, "chaos", "q") == nil {
					merges++
				}
			default:
				_ = tn.node.SplitTable(ctx, acct, "chaos", "q") // "pair" below, "r" above
			}
			break
		}
		handOvers++
		for _, tn := range c.nodes {
			ranges, err := tn.node.st().TableRanges(acct, "chaos")
			if err != nil || len(ranges) < 2 {
				continue
			}
			g := ranges[handOvers%len(ranges)].Group
			if r := tn.node.testGroup(g.ID); r == nil || !r.ready.Load() {
				continue
			}
			to := g.Voters[(slices.Index(g.Voters, tn.id)+1)%len(g.Voters)]
			transfers.Go(func() {
				// Waits until the lease arrives: the injector goes on.
				tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				_, _ = tn.node.TransferLease(tctx, acct, "chaos", g.Start, to)
			})
			leasesAsked++
			break
		}
		nodesMu.Unlock()
	}
	for time.Since(start) < dur {
		time.Sleep(time.Duration(20+frng.IntN(40)) * time.Millisecond)
		switch k := frng.IntN(7); {
		case k == 6 && moves: // one of the table's groups is to move to 3 nodes of 4
			voters := frng.Perm(size)[:3]
			want := []uint64{uint64(voters[0] + 1), uint64(voters[1] + 1), uint64(voters[2] + 1)}
			which := frng.IntN(2)
			nodesMu.Lock()
			for _, tn := range c.nodes {
				ranges, err := tn.node.st().TableRanges(acct, "chaos")
				if tn.node.IsLeader() && err == nil {
					// Refused or unknown when the leader falls meanwhile:
					// the move is then made or not, and either is fine.
					if tn.node.SetGroupVoters(ctx, ranges[which%len(ranges)].Group.ID, want) == nil {
						movesNamed++
					}
					break
				}
			}
			nodesMu.Unlock()
		case k == 5 && moves: // the table splits between its two partitions, or
			// merges back once split; a range's leader hands its lease to
			// another voter
			reshape()
		case k <= 1: // lose power on a running node, if the others stay up
			nodesMu.Lock()
			if len(c.nodes) == size {
				id := uint64(1 + frng.IntN(size))
				disk := c.crash(id, rand.New(rand.NewPCG(seed, frng.Uint64())))
				down[id] = true
				nodesMu.Unlock()
				time.Sleep(time.Duration(frng.IntN(60)) * time.Millisecond)
				nodesMu.Lock()
				c.start(id, disk)
				delete(down, id)
			}
			nodesMu.Unlock()
		case k == 2: // isolate one node, the leader when there is one: the case
			// where a deposed leader could still answer
			id := uint64(1 + frng.IntN(size))
			nodesMu.Lock()
			for lid, tn := range c.nodes {
				if leads(tn) && frng.IntN(3) > 0 {
					id = lid
				}
			}
			nodesMu.Unlock()
			var others []uint64
			for _, p := range c.peers {
				if p != id {
					others = append(others, p)
				}
			}
			c.net.partition([]uint64{id}, others)
		case k == 3:
			c.net.heal()
			nodesMu.Lock()
			for _, tn := range c.nodes {
				tn.paused.Store(false)
			}
			nodesMu.Unlock()
		case k == 4: // the leader's process stalls while cut off: it still
			// believes it leads after the others have elected another
			nodesMu.Lock()
			for lid, tn := range c.nodes {
				if leads(tn) {
					tn.paused.Store(true)
					var others []uint64
					for _, p := range c.peers {
						if p != lid {
							others = append(others, p)
						}
					}
					c.net.partition([]uint64{lid}, others)
				}
			}
			nodesMu.Unlock()
		default: // nothing: partitions last long enough to elect around them
		}
		if reshapes && frng.IntN(2) == 0 {
			reshape()
		}
	}
	transfers.Wait()
	c.net.heal()
	for _, tn := range c.nodes {
		tn.paused.Store(false)
	}
	close(stop)
	wg.Wait()

	res, info := porcupine.CheckOperationsVerbose(chaosModel, history, time.Minute)
	if res != porcupine.Ok {
		t.Errorf("seed %d: the history of %d operations is not linearizable (%v)", seed, len(history), res)
		// The visualization shows the registers that have no
		// linearization and how far each got.
		vis := filepath.Join(os.TempDir(), fmt.Sprintf("chaos-seed%d%s-%d.html", seed, mode, time.Now().UnixNano()))
		if err := porcupine.VisualizePath(chaosModel, info, vis); err == nil {
			t.Logf("the history, visualized: %s", vis)
		}
	}
	// One entity's timestamps grow with real time: a write acknowledged
	// before another began carries a smaller timestamp.
	for k, ws := range stamps {
		for _, a := range ws {
			for _, b := range ws {
				if a.ret < b.call && a.ts >= b.ts {
					t.Errorf("seed %d: key %d: a write acknowledged at %d stamped %d, one begun after at %d stamped %d", seed, k, a.ret, a.ts, b.call, b.ts)
				}
			}
		}
	}
	c.settle = true
	c.converge(20 * time.Second)
	// Every range of the table: its group's members hold alike what its
	// span holds, the other nodes nothing of it.
	spans := []partition.TableGroup{{Account: acct, Table: "chaos", Group: partition.RangeGroup{Voters: c.peers}}}
	if ranges {
		// Once the nodes agree on the ranges, each range's group makes
		// its span match (a split or a merge in flight).
		var starts []string
		for _, tg := range c.agreedRanges("chaos", 20*time.Second) {
			starts = append(starts, tg.Group.Start)
		}
		spans = c.waitSplit("chaos", starts, 30*time.Second)
	}
	var all string
	for _, tg := range spans {
		members := tg.Group.Voters
		if ranges {
			c.waitMembers(tg.Group.ID, members, 20*time.Second)
			c.convergeMembers(tg.Group.ID, members, 20*time.Second)
			for _, id := range c.peers {
				if !slices.Contains(members, id) {
					c.waitRetiredSpan(id, tg.Group.ID, tg.Span(), 20*time.Second)
				}
			}
		}
		var want string
		for _, id := range members {
			got := dumpSpan(t, c.nodes[id].node.Replica(), tg.Span())
			if want == "" {
				want = got
			} else if got != want {
				t.Errorf("seed %d: node %d differs in group %d from node %d:\n%s\n---\n%s", seed, id, tg.Group.ID, members[0], got, want)
			}
		}
		if t.Failed() {
			for _, id := range members {
				a, _ := c.nodes[id].node.st().AppliedIndex(tg.Group.ID)
				if r := c.nodes[id].node.testGroup(tg.Group.ID); r != nil {
					t.Logf("node %d: member %x applied %d (store %d), conf %v, record %+v", id, r.id, r.applied.Load(), a, r.confState(),
						c.nodes[id].logGroup(tg.Group.ID).Replica())
				}
			}
		}
		all += want
	}
	// A walk of the whole table, page by page through any node, returns
	// every entity once, across the ranges.
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(all), "\n") {
		if k, _, ok := strings.Cut(line, "@"); ok {
			keys = append(keys, k)
		}
	}
	if got, trace := walkQueryTraced(c, "chaos", partition.EntityQuery{Top: 2}); !slices.Equal(got, keys) {
		t.Errorf("seed %d: a query walk read %v, the members hold %v:\n%s", seed, got, keys, trace)
		for _, tg := range spans {
			for _, tn := range c.nodes {
				if r := tn.node.testGroup(tg.Group.ID); r != nil {
					sp, _, _ := tn.node.st().GroupSpan(tg.Group.ID)
					t.Logf("node %d group %d: member %x ready %v leader %d applied %d conf %v span %+v\n%s", tn.id, tg.Group.ID, r.id,
						r.ready.Load(), r.leader.Load(), r.applied.Load(), r.confState(), sp, dumpSpan(t, tn.node.st(), tg.Span()))
				}
			}
		}
	}
	snaps, spanSnaps, wakes, loads := 0, 0, uint64(0), uint64(0)
	for _, tn := range c.nodes {
		st := tn.node.Status()
		snaps, spanSnaps = snaps+st.SnapshotsInstalled, spanSnaps+st.SpanSnapshotsInstalled
		wakes, loads = wakes+st.DormantWakes, loads+st.ReplicaLoads
	}
	t.Logf("seed %d: %d operations; snapshots installed by the running nodes: %d of the store, %d of spans; %d moves named; %d lease hand-overs asked; %d merges; %d ranges; %d replicas woken from dormancy, %d loaded again",
		seed, len(history), snaps, spanSnaps, movesNamed, leasesAsked, merges, len(spans), wakes, loads)
}

type stamped struct {
	call, ret int64
	ts        odata.DateTime
}

// runChaosOp performs op on s. Refused means the node was not the leader
// (nothing happened); unknown, that a write's fate is unknown. An error
// is a failure of the test itself.
func runChaosOp(ctx context.Context, s *Store, op chaosOp) (chaosOut, odata.DateTime, error) {
	rk := fmt.Sprint(op.Key)
	val := func(e partition.StoredEntity) (int, error) {
		var ent odata.Entity
		if err := odata.DecodeEntityBinary(e.Value, &ent); err != nil {
			return 0, err
		}
		v, _ := ent.Get("N")
		return int(v.Int32()), nil
	}
	outcome := func(err error) (chaosOut, bool) {
		switch code := codeOf(err); {
		case err == nil:
			return chaosOut{Outcome: "ok"}, true
		case code == "ServerBusy":
			return chaosOut{Outcome: "refused"}, true
		case code == "OperationTimedOut", errors.Is(err, ErrStopped), errors.Is(err, context.DeadlineExceeded),
			errors.Is(err, lsm.ErrClosed): // the node lost power while it answered
			return chaosOut{Outcome: "unknown"}, true
		case code == partition.CodeResourceNotFound:
			return chaosOut{Outcome: "notfound"}, true
		case code == partition.CodeEntityAlreadyExists:
			return chaosOut{Outcome: "exists"}, true
		}
		return chaosOut{}, false
	}
	var (
		e   partition.StoredEntity
		err error
	)
	switch op.Kind {
	case "get":
		e, err = s.GetEntity(ctx, acct, "chaos", "r", rk)
		out, ok := outcome(err)
		if !ok {
			return out, 0, err
		}
		if out.Outcome == "ok" {
			if out.N, err = val(e); err != nil {
				return out, 0, err
			}
		}
		if out.Outcome == "unknown" {
			out.Outcome = "refused" // a read that did not finish observed nothing
		}
		return out, 0, nil
	case "put", "insert":
		kind := partition.OpInsertOrReplace
		if op.Kind == "insert" {
			kind = partition.OpInsert
		}
		e, err = s.Apply(ctx, acct, "chaos", partition.Op{Kind: kind, Entity: ent("r", rk, op.N)})
	case "delete":
		_, err = s.Apply(ctx, acct, "chaos", partition.Op{Kind: partition.OpDelete, IfMatch: "*", Entity: &odata.Entity{PartitionKey: "r", RowKey: rk}})
	case "pairput":
		var es []partition.StoredEntity
		es, err = s.ExecuteBatch(ctx, acct, "chaos", []partition.Op{
			{Kind: partition.OpInsertOrReplace, Entity: ent("pair", "a", op.N)},
			{Kind: partition.OpInsertOrReplace, Entity: ent("pair", "b", op.N)},
		})
		if err == nil {
			e = es[0]
		}
	case "pairget":
		// One page is read at one snapshot: both of the pair, or neither,
		// and from the same batch.
		page := map[string]int{}
		_, err = s.QueryEntities(ctx, acct, "chaos", partition.EntityQuery{Filter: "PartitionKey eq 'pair'"}, func(se *partition.StoredEntity) error {
			n, err := val(*se)
			page[se.RowKey] = n
			return err
		})
		out, ok := outcome(err)
		if !ok {
			return out, 0, err
		}
		if out.Outcome == "unknown" {
			return chaosOut{Outcome: "refused"}, 0, nil
		}
		if out.Outcome != "ok" {
			return out, 0, nil
		}
		a, okA := page["a"]
		b, okB := page["b"]
		switch {
		case !okA && !okB:
			return chaosOut{Outcome: "notfound"}, 0, nil
		case okA != okB || a != b:
			return out, 0, fmt.Errorf("a read saw half a batch: %v", page)
		}
		return chaosOut{Outcome: "ok", N: a}, 0, nil
	}
	out, ok := outcome(err)
	if !ok {
		return out, 0, err
	}
	if out.Outcome == "ok" {
		return out, e.Timestamp, nil
	}
	return out, 0, nil
}

// retryLeader runs f on whichever node is the ready leader until it is
// not refused.
func retryLeader(c *testCluster, f func(*Store) (partition.StoredEntity, error)) (partition.StoredEntity, error) {
	for range 200 {
		ld := c.leader(10 * time.Second)
		e, err := f(ld.node.Store())
		if isBusy(err) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return e, err
	}
	return partition.StoredEntity{}, errors.New("no leader took the request")
}
