package partition

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/vfs"
)

var (
	powerLossDuration = flag.Duration("powerloss-duration", 1500*time.Millisecond,
		"time budget of TestPowerLoss (at least two rounds run)")
	powerLossSeed = flag.Uint64("powerloss-seed", 0,
		"run only this seed of TestPowerLoss, again and again for its time budget (failures name their seed)")
)

// TestPowerLoss is the table service's power-loss test. Each round runs a
// few actors, each owning its own tables, that create and drop tables, set
// ACLs and write entities one by one and in batches (some failing a
// condition), while a maintenance actor splits and merges ranges, flushes
// and compacts, and a fake wall clock runs fast enough (and now and then
// back) that the timestamp lease is renewed every few dozen writes. At
// random moments it takes crash clones of the in-memory filesystem,
// sometimes keeping random prefixes of unsynced data. Odd seeds run the
// actors one step at a time, so a clone sees no write in flight; even seeds
// run them concurrently and clone while they write.
//
// Each clone is opened, and for every actor the recovered tables (which
// exist, their names as created, ACLs, entities with ETags and properties)
// must be exactly the actor's model after some prefix of its steps that
// holds every step acknowledged before the clone and at most the steps
// begun before it: acknowledged writes are there unless a later step
// replaced them, failed batches left nothing, and an unacknowledged batch
// is all there or not at all. The recovered range statistics must be
// exact after the recount a crash calls for, and dropped tables' keys must
// be reclaimed. Then the actors go on from the recovered state, every
// timestamp they get must be greater than every one acknowledged before
// the crash or recovered from it (the reopened wall clock is set far
// behind or ahead), and a second clean crash must keep all of that.
//
// The default budget is short; -powerloss-duration=10m runs many more
// seeds. Thread interleavings are not reproducible, so -powerloss-seed
// repeats one seed for the whole budget (odd seeds replay exactly but for
// the engine's background timing); a failure names the seed and the clone.
func TestPowerLoss(t *testing.T) {
	start := time.Now()
	var st plStats
	rounds := 0
	for seed := uint64(1); rounds < 2 || time.Since(start) < *powerLossDuration; seed++ {
		if *powerLossSeed != 0 {
			seed = *powerLossSeed
		}
		powerLossRound(t, seed, &st)
		rounds++
	}
	t.Logf("%d rounds: %d clones checked (%d with writes in flight, %d of them recovering one), %d steps, %d lease renewals, %d splits, %d merges, %d tables dropped",
		rounds, st.clones, st.inFlight, st.inFlightKept, st.steps, st.renewals.Load(), st.splits, st.merges, st.drops)
	// Seed 1 alone (sequential, so its ranges evolve the same every time)
	// splits and merges.
	if *powerLossSeed == 0 && (st.renewals.Load() < int64(rounds) || st.splits == 0 || st.merges == 0) {
		t.Fatalf("the workload no longer exercises lease renewals (%d), splits (%d) and merges (%d)", st.renewals.Load(), st.splits, st.merges)
	}
}

type plStats struct {
	clones, inFlight, inFlightKept, steps, splits, merges, drops int
	renewals                                                     atomic.Int64
}

const (
	plActors     = 3
	plTablesEach = 3
	plPKs        = 5
	plRKs        = 30
)

// plEpoch is where the fake wall clocks of a round start.
var plEpoch = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a store's wall clock. Every reading moves it by a
// pseudo-random step of -5 to +45 ms: fast enough that the timestamp
// lease (one second ahead) is renewed every few dozen writes, and now and
// then backwards, as a stepped wall clock goes.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
	n   uint64
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	h := c.n * 0x9e3779b97f4a7c15
	h ^= h >> 29
	c.now = c.now.Add(time.Duration(h%50)*time.Millisecond - 5*time.Millisecond)
	return c.now
}

// plTable is the model of one table: its name as created, its ACL and its
// entities.
type plTable struct {
	name string
	acl  []SignedIdentifier
	ents model
}

// plState is the model of an actor's tables, by lower-case name; a state
// is never changed once recorded (mut copies what it changes).
type plState map[string]*plTable

func (st plState) mut(lower string) *plTable {
	c := *st[lower]
	c.ents = c.ents.clone()
	st[lower] = &c
	return &c
}

// plActor owns the tables a<id>t<j>: no one else touches them, so its
// steps are sequential and its model exact.
type plActor struct {
	id     int
	rng    *rand.Rand
	states []plState        // states[k] is the model after k steps
	maxTS  []odata.DateTime // maxTS[k] bounds the timestamps of steps before k
	etags  []string         // every ETag it got, for stale If-Match values
	ops    []string         // what each step did, for failure messages
	// started counts the steps begun, done those returned; a clone taken
	// between reading done and reading started holds a prefix of the
	// steps between the two.
	started, done atomic.Int64
}

func newPLActor(id int, seed uint64, st plState, floor odata.DateTime) *plActor {
	return &plActor{
		id:     id,
		rng:    rand.New(rand.NewPCG(seed, uint64(id))),
		states: []plState{st},
		maxTS:  []odata.DateTime{floor},
	}
}

func (a *plActor) lowerName(j int) string { return fmt.Sprintf("a%dt%d", a.id, j) }

func (a *plActor) last() plState { return a.states[len(a.states)-1] }

// randomCase spells a table name as a client might: names are
// case-insensitive and stored as created.
func randomCase(r *rand.Rand, lower string) string {
	b := []byte(lower)
	for i := range b {
		if r.IntN(3) == 0 {
			b[i] = strings.ToUpper(string(b[i]))[0]
		}
	}
	return string(b)
}

// pickTable mostly picks a table that exists.
func (a *plActor) pickTable(st plState) string {
	var live []string
	for j := range plTablesEach {
		if st[a.lowerName(j)] != nil {
			live = append(live, a.lowerName(j))
		}
	}
	if len(live) > 0 && a.rng.IntN(20) > 0 {
		return live[a.rng.IntN(len(live))]
	}
	return a.lowerName(a.rng.IntN(plTablesEach))
}

func (a *plActor) entity(pk string) *odata.Entity {
	r := a.rng
	e := ent(pk, fmt.Sprintf("r%02d", r.IntN(plRKs)))
	if r.IntN(4) > 0 {
		e.Properties = append(e.Properties, odata.Property{Name: "N", Value: odata.Int32Value(int32(r.IntN(100)))})
	}
	if r.IntN(2) > 0 {
		e.Properties = append(e.Properties, odata.Property{Name: "Pad", Value: odata.StringValue(strings.Repeat("z", r.IntN(400)))})
	}
	return e
}

func (a *plActor) randomOp(ents model, pk string) Op {
	r := a.rng
	op := Op{Kind: OpKind(1 + r.IntN(6)), Entity: a.entity(pk)}
	if op.Kind == OpUpdate || op.Kind == OpMerge || op.Kind == OpDelete || (op.Kind != OpInsert && r.IntN(4) == 0) {
		switch x := r.IntN(8); {
		case x == 0:
			// No If-Match where one is required: refused.
		case x < 3:
			op.IfMatch = "*"
		case x == 3 && len(a.etags) > 0:
			op.IfMatch = a.etags[r.IntN(len(a.etags))]
		default:
			op.IfMatch = "*"
			if cur := ents[[2]string{pk, op.Entity.RowKey}]; cur != nil {
				op.IfMatch = cur.etag
			}
		}
	}
	return op
}

func randomACL(r *rand.Rand) []SignedIdentifier {
	var ids []SignedIdentifier
	for i := range r.IntN(4) {
		id := SignedIdentifier{ID: fmt.Sprintf("policy%d", i), Permission: []string{"", "r", "raud"}[r.IntN(3)]}
		if r.IntN(2) == 0 {
			id.Start = time.Unix(1_700_000_000+r.Int64N(1e6), r.Int64N(1e9)).UTC()
		}
		if r.IntN(2) == 0 {
			id.Expiry = time.Unix(1_800_000_000+r.Int64N(1e6), 0).UTC()
		}
		ids = append(ids, id)
	}
	return ids
}

// codeErr says what is wrong when err does not carry code ("" = success).
func codeErr(what string, err error, code string) error {
	if got := ErrorCode(err); got != code || (code == "" && err != nil) {
		return fmt.Errorf("%s: error %v (code %q), model says %q", what, err, got, code)
	}
	return nil
}

// step runs one random operation and checks its outcome against the model;
// every timestamp it gets must be after every earlier one of the actor
// (maxTS starts at the newest timestamp before a crash).
func (a *plActor) step(ctx context.Context, s *Store) error {
	k := len(a.states) - 1
	next := maps.Clone(a.last())
	var stamps []odata.DateTime
	a.started.Add(1)
	what, err := a.do(ctx, s, next, &stamps)
	if err != nil {
		return fmt.Errorf("actor %d step %d (%s): %w", a.id, k, what, err)
	}
	m := a.maxTS[k]
	for _, ts := range stamps {
		if ts <= m {
			return fmt.Errorf("actor %d step %d (%s): timestamp %v not after %v", a.id, k, what, ts, m)
		}
		m = ts
	}
	a.states = append(a.states, next)
	a.maxTS = append(a.maxTS, m)
	a.ops = append(a.ops, what)
	a.done.Add(1)
	return nil
}

func (a *plActor) do(ctx context.Context, s *Store, next plState, stamps *[]odata.DateTime) (string, error) {
	r := a.rng
	lower := a.pickTable(next)
	name := randomCase(r, lower)
	exists := next[lower] != nil
	missing := ""
	if !exists {
		missing = CodeTableNotFound
	}
	switch x := r.IntN(100); {
	case x < 4 || len(next) == 0:
		what := "create " + name
		_, err := s.CreateTable(ctx, acct, name)
		want := ""
		if exists {
			want = CodeTableAlreadyExists
		} else {
			next[lower] = &plTable{name: name, ents: model{}}
		}
		return what, codeErr(what, err, want)
	case x < 6:
		what := "delete " + name
		err := s.DeleteTable(ctx, acct, name)
		delete(next, lower)
		return what, codeErr(what, err, missing)
	case x < 12:
		ids := randomACL(r)
		what := fmt.Sprintf("set ACL of %s (%d policies)", name, len(ids))
		err := s.SetTableACL(ctx, acct, name, ids)
		if exists {
			next.mut(lower).acl = ids
		}
		return what, codeErr(what, err, missing)
	case x < 20:
		k := [2]string{fmt.Sprint("p", r.IntN(plPKs)), fmt.Sprintf("r%02d", r.IntN(plRKs))}
		what := fmt.Sprintf("get %s %v", name, k)
		got, err := s.GetEntity(ctx, acct, name, k[0], k[1])
		switch {
		case !exists:
			return what, codeErr(what, err, CodeTableNotFound)
		case next[lower].ents[k] == nil:
			return what, codeErr(what, err, CodeResourceNotFound)
		case err != nil || got.ETag() != next[lower].ents[k].etag:
			return what, fmt.Errorf("%s: ETag %s, %v; model %s", what, got.ETag(), err, next[lower].ents[k].etag)
		}
		return what, nil
	case x < 75:
		var ents model
		if exists {
			ents = next[lower].ents
		}
		op := a.randomOp(ents, fmt.Sprint("p", r.IntN(plPKs)))
		what := fmt.Sprintf("%v %s (%s, %s) If-Match %q", op.Kind, name, op.Entity.PartitionKey, op.Entity.RowKey, op.IfMatch)
		res, err := s.Apply(ctx, acct, name, op)
		want := missing
		if exists {
			want = next.mut(lower).ents.apply(op, res.ETag())
		}
		if err == nil && op.Kind != OpDelete {
			*stamps = append(*stamps, res.Timestamp)
			a.etags = append(a.etags, res.ETag())
		}
		return what, codeErr(what, err, want)
	default:
		var ents model
		if exists {
			ents = next[lower].ents
		}
		pk := fmt.Sprint("p", r.IntN(plPKs))
		var ops []Op
		seen := map[string]bool{}
		// Half the batches are upserts, which succeed and grow the tables,
		// a sixth delete, which shrinks them (so that ranges merge); the
		// others mostly fail a condition somewhere.
		switch kind := r.IntN(6); {
		case kind == 0:
			for i := range plRKs {
				rk := fmt.Sprintf("r%02d", i)
				if ents[[2]string{pk, rk}] != nil && r.IntN(3) > 0 {
					ops = append(ops, Op{Kind: OpDelete, Entity: ent(pk, rk), IfMatch: "*"})
				}
			}
		default:
			for range 1 + r.IntN(12) {
				op := a.randomOp(ents, pk)
				if kind < 4 {
					op.Kind, op.IfMatch = []OpKind{OpInsertOrReplace, OpInsertOrMerge}[r.IntN(2)], ""
				}
				if !seen[op.Entity.RowKey] {
					seen[op.Entity.RowKey] = true
					ops = append(ops, op)
				}
			}
		}
		what := fmt.Sprintf("batch of %d on %s partition %s", len(ops), name, pk)
		res, err := s.ExecuteBatch(ctx, acct, name, ops)
		failAt, code := 0, missing
		var mm model
		if exists {
			mm = ents.clone()
			failAt = -1
			for i, op := range ops {
				etag := ""
				if err == nil {
					etag = res[i].ETag()
				}
				if code = mm.apply(op, etag); code != "" {
					failAt = i
					break
				}
			}
		}
		var be *BatchError
		switch {
		case failAt < 0 && err != nil:
			return what, fmt.Errorf("%s: failed: %v; model says it succeeds", what, err)
		case failAt >= 0 && (!errors.As(err, &be) || be.Index != failAt || ErrorCode(err) != code):
			return what, fmt.Errorf("%s: error %v, model says %s at %d", what, err, code, failAt)
		case failAt < 0:
			next.mut(lower).ents = mm
			for i := range res {
				if ops[i].Kind != OpDelete {
					*stamps = append(*stamps, res[i].Timestamp)
					a.etags = append(a.etags, res[i].ETag())
				}
			}
			what += " (applied)"
		default:
			what += fmt.Sprintf(" (refused at %d: %s)", failAt, code)
		}
		return what, nil
	}
}

// plMaint is the maintenance actor: ticks (splits, merges, statistics),
// flushes and compactions.
type plMaint struct {
	rng            *rand.Rand
	splits, merges int
}

func (m *plMaint) step(s *Store) error {
	r := m.rng
	switch x := r.IntN(20); {
	case x < 14:
		before := map[*table]int{}
		for _, t := range s.liveTables() {
			before[t] = len(t.rangeList())
		}
		s.maintain(time.Duration(50+r.IntN(2000)) * time.Millisecond)
		for t, n := range before {
			switch after := len(t.rangeList()); {
			case after > n:
				m.splits++
			case after < n:
				m.merges++
			}
		}
	case x < 17:
		return s.db.Flush()
	case x < 19:
		if tables := s.liveTables(); len(tables) > 0 {
			lo, hi := tables[r.IntN(len(tables))].bounds("", "")
			return s.db.Compact(lo, hi)
		}
	default:
		return s.db.Compact(nil, nil)
	}
	return nil
}

// plClone is a crash clone and, per actor, the steps done before it was
// taken and the steps begun by then.
type plClone struct {
	fs     *vfs.MemFS
	lo, hi []int
	tails  bool
}

func takeClone(mem *vfs.MemFS, actors []*plActor, tails *rand.Rand) plClone {
	c := plClone{lo: make([]int, len(actors)), hi: make([]int, len(actors)), tails: tails != nil}
	for i, a := range actors {
		c.lo[i] = int(a.done.Load())
	}
	c.fs = mem.CrashClone(tails)
	for i, a := range actors {
		c.hi[i] = int(a.started.Load())
	}
	return c
}

func plOptions(r *rand.Rand, fs vfs.FS, now func() time.Time) Options {
	split := int64(2<<10 + r.IntN(3<<10))
	return Options{
		LSM: lsm.Options{
			FS:                           fs,
			MemTableSize:                 int64(16<<10 + r.IntN(48<<10)),
			L0CompactionThreshold:        2,
			L0StopWritesThreshold:        8,
			LBaseMaxBytes:                64 << 10,
			LevelMultiplier:              4,
			TargetFileSize:               16 << 10,
			BlockSize:                    512,
			CacheSize:                    64 << 10,
			DisableBackgroundCompactions: r.IntN(5) == 0,
		},
		SplitBytes:        split,
		SplitOpsPerSecond: []float64{1e9, 300}[r.IntN(2)],
		// Close to SplitBytes, so that a few deletes merge what split.
		MergeBytes:  split * int64(50+r.IntN(40)) / 100,
		PageTimeout: time.Hour, // the fake clock runs fast
		Now:         now,
	}
}

var plTuning = tuning{persistEvery: 3, mergeMinAge: 2}

// plOpen opens a store on opts and counts its lease renewals.
func plOpen(opts Options, renewals *atomic.Int64) (*Store, error) {
	s, err := open("db", &opts, plTuning)
	if err != nil {
		return nil, err
	}
	save := s.clock.saveLease
	s.clock.saveLease = func(ts odata.DateTime) error {
		renewals.Add(1)
		return save(ts)
	}
	return s, nil
}

func powerLossRound(t *testing.T, seed uint64, st *plStats) {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	concurrent := seed%2 == 0
	mem := vfs.NewMem()
	clk := &fakeClock{now: plEpoch}
	opts := plOptions(r, mem, clk.Now)
	s, err := plOpen(opts, &st.renewals)
	if err != nil {
		t.Fatalf("seed %d: open: %v", seed, err)
	}
	actors := make([]*plActor, plActors)
	for i := range actors {
		actors[i] = newPLActor(i, r.Uint64(), plState{}, 0)
	}
	maint := &plMaint{rng: rand.New(rand.NewPCG(r.Uint64(), 0))}
	steps := 60 + r.IntN(120)
	var clones []plClone
	tails := func() *rand.Rand {
		if r.IntN(2) == 0 {
			return rand.New(rand.NewPCG(r.Uint64(), 1))
		}
		return nil
	}
	if concurrent {
		clones = runConcurrent(t, seed, r, s, mem, actors, maint, steps, tails)
	} else {
		for range steps * plActors {
			if r.IntN(4) == 0 {
				if err := maint.step(s); err != nil {
					t.Fatalf("seed %d: maintenance: %v", seed, err)
				}
			}
			a := actors[r.IntN(plActors)]
			before := len(a.last())
			if err := a.step(ctx, s); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			// Table creations and drops are rare: crash after them more.
			odds := 30
			if len(a.last()) != before {
				odds = 4
			}
			if r.IntN(odds) == 0 {
				clones = append(clones, takeClone(mem, actors, tails()))
			}
		}
	}
	// The live store's drops must be reclaimed as well as a recovered one's.
	s.waitDrops()
	if err := checkNoOrphans(s); err != nil {
		t.Fatalf("seed %d: before the close: %v", seed, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("seed %d: close: %v", seed, err)
	}
	for _, a := range actors {
		st.steps += len(a.states) - 1
		for k := 1; k < len(a.states); k++ {
			st.drops += max(0, len(a.states[k-1])-len(a.states[k]))
		}
	}
	st.splits += maint.splits
	st.merges += maint.merges
	for i, c := range clones {
		checkPowerLossClone(t, fmt.Sprintf("seed %d clone %d", seed, i), r, c, opts, actors, st)
	}
}

// runConcurrent runs every actor and the maintenance actor in goroutines
// of their own and takes crash clones while they run, spread over the
// steps.
func runConcurrent(t *testing.T, seed uint64, r *rand.Rand, s *Store, mem *vfs.MemFS, actors []*plActor, maint *plMaint, steps int, tails func() *rand.Rand) []plClone {
	t.Helper()
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		firstEr error
		running atomic.Int32
		stop    atomic.Bool
	)
	fail := func(err error) {
		errMu.Lock()
		if firstEr == nil {
			firstEr = err
		}
		errMu.Unlock()
		stop.Store(true)
	}
	for _, a := range actors {
		wg.Add(1)
		running.Add(1)
		go func() {
			defer wg.Done()
			defer running.Add(-1)
			for range steps {
				if stop.Load() {
					return
				}
				if err := a.step(ctx, s); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for running.Load() > 0 && !stop.Load() {
			if err := maint.step(s); err != nil {
				fail(fmt.Errorf("maintenance: %w", err))
				return
			}
			time.Sleep(time.Duration(maint.rng.IntN(500)) * time.Microsecond)
		}
	}()
	// Clone when the actors together have done a random number of steps.
	var at []int
	for range 3 + r.IntN(5) {
		at = append(at, r.IntN(steps*len(actors)))
	}
	slices.Sort(at)
	var clones []plClone
	for running.Load() > 0 && len(at) > 0 {
		total := 0
		for _, a := range actors {
			total += int(a.done.Load())
		}
		if total < at[0] {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		at = at[1:]
		clones = append(clones, takeClone(mem, actors, tails()))
	}
	wg.Wait()
	if firstEr != nil {
		t.Fatalf("seed %d: %v", seed, firstEr)
	}
	return clones
}

// checkPowerLossClone opens a clone, checks what it holds against the
// actors' models, goes on writing from there, and crashes once more.
func checkPowerLossClone(t *testing.T, what string, r *rand.Rand, c plClone, opts Options, actors []*plActor, st *plStats) {
	t.Helper()
	ctx := context.Background()
	st.clones++
	// The wall clock after the restart is far behind or far ahead of the
	// one before: timestamps must go on increasing either way.
	clk := &fakeClock{now: plEpoch.Add([]time.Duration{-time.Hour, 0, 3 * time.Hour}[r.IntN(3)])}
	opts.Now = clk.Now
	opts.LSM.FS = c.fs
	s, err := plOpen(opts, &st.renewals)
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	got, newest, err := readPLState(ctx, s)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	floor := newest
	inFlight, kept := false, false
	next := make([]*plActor, len(actors))
	for i, a := range actors {
		lo, hi := c.lo[i], c.hi[i]
		found := -1
		for k := lo; k <= hi && found < 0; k++ {
			if diffPLState(got[i], a.states[k]) == "" {
				found = k
			}
		}
		if found < 0 {
			msg := fmt.Sprintf("%s (tails %v): actor %d recovered a state that is no prefix of its steps %d (done before the crash) to %d (begun):\n  vs %d: %s",
				what, c.tails, i, lo, hi, lo, diffPLState(got[i], a.states[lo]))
			for k := lo; k < hi && k < lo+3; k++ {
				msg += fmt.Sprintf("\n  step %d was %s", k, a.ops[k])
			}
			t.Fatal(msg)
		}
		inFlight = inFlight || hi > lo
		kept = kept || found > lo
		floor = max(floor, a.maxTS[lo])
		next[i] = newPLActor(i, r.Uint64(), a.states[found], 0)
	}
	if inFlight {
		st.inFlight++
	}
	if kept {
		st.inFlightKept++
	}
	for _, a := range next {
		a.maxTS[0] = floor
	}

	// A crash leaves the persisted statistics stale: the first tick
	// recounts them.
	s.maintain(time.Second)
	if err := checkPLRanges(ctx, s); err != nil {
		t.Fatalf("%s: after the recount: %v", what, err)
	}
	// Drops made durable before the crash finish after it.
	s.waitDrops()
	if err := checkNoOrphans(s); err != nil {
		t.Fatalf("%s: %v", what, err)
	}

	// Go on from the recovered state.
	maint := &plMaint{rng: rand.New(rand.NewPCG(r.Uint64(), 0))}
	for range 20 * len(next) {
		if r.IntN(8) == 0 {
			if err := maint.step(s); err != nil {
				t.Fatalf("%s: maintenance after reopen: %v", what, err)
			}
		}
		if err := next[r.IntN(len(next))].step(ctx, s); err != nil {
			t.Fatalf("%s: after reopen: %v", what, err)
		}
	}
	for _, a := range next {
		floor = max(floor, a.maxTS[len(a.maxTS)-1])
	}

	// Crash again with nothing in flight: everything acknowledged since the
	// reopen is there, and the clock still only moves forward.
	again := c.fs.CrashClone(nil)
	if err := s.Close(); err != nil {
		t.Fatalf("%s: close after reopen: %v", what, err)
	}
	s = nil
	opts.LSM.FS = again
	opts.Now = (&fakeClock{now: plEpoch.Add(-2 * time.Hour)}).Now
	s2, err := plOpen(opts, &st.renewals)
	if err != nil {
		t.Fatalf("%s: second crash: open: %v", what, err)
	}
	defer s2.Close()
	got, _, err = readPLState(ctx, s2)
	if err != nil {
		t.Fatalf("%s: second crash: %v", what, err)
	}
	for i, a := range next {
		if d := diffPLState(got[i], a.last()); d != "" {
			t.Fatalf("%s: second crash: actor %d lost acknowledged steps: %s", what, i, d)
		}
		a.maxTS = append(a.maxTS[:0], floor)
		a.states = a.states[len(a.states)-1:]
		for range 3 {
			if err := a.step(ctx, s2); err != nil {
				t.Fatalf("%s: after the second crash: %v", what, err)
			}
		}
	}
	if err := s2.Close(); err != nil {
		t.Fatalf("%s: close after second crash: %v", what, err)
	}
}

// readPLState reads every table of the account through the service's API
// and sorts them by actor; it also returns the newest Timestamp found.
func readPLState(ctx context.Context, s *Store) ([]plState, odata.DateTime, error) {
	out := make([]plState, plActors)
	for i := range out {
		out[i] = plState{}
	}
	var newest odata.DateTime
	q := TableQuery{Top: 4}
	for {
		page, err := s.QueryTables(ctx, acct, q)
		if err != nil {
			return nil, 0, fmt.Errorf("query tables: %w", err)
		}
		for _, tb := range page.Tables {
			lower := strings.ToLower(tb.Name)
			var actor, j int
			if _, err := fmt.Sscanf(lower, "a%dt%d", &actor, &j); err != nil || actor >= plActors {
				return nil, 0, fmt.Errorf("unexpected table %q", tb.Name)
			}
			acl, err := s.GetTableACL(ctx, acct, tb.Name)
			if err != nil {
				return nil, 0, fmt.Errorf("ACL of %s: %w", tb.Name, err)
			}
			m := &plTable{name: tb.Name, acl: acl, ents: model{}}
			var eq EntityQuery
			for {
				ents, c, err := s.QueryEntitiesPage(ctx, acct, tb.Name, eq)
				if err != nil {
					return nil, 0, fmt.Errorf("query %s: %w", tb.Name, err)
				}
				for _, se := range ents {
					x, err := se.Entity()
					if err != nil {
						return nil, 0, err
					}
					m.ents[[2]string{se.PartitionKey, se.RowKey}] = &modelEntity{props: x.Properties, etag: se.ETag()}
					newest = max(newest, se.Timestamp)
				}
				if c.IsZero() {
					break
				}
				eq.NextPartitionKey, eq.NextRowKey = c.NextPartitionKey, c.NextRowKey
			}
			out[actor][lower] = m
		}
		if page.NextTableName == "" {
			return out, newest, nil
		}
		q.NextTableName = page.NextTableName
	}
}

// diffPLState describes the first difference between a recovered state
// and a model state, or returns "".
func diffPLState(got, want plState) string {
	for _, lower := range slices.Sorted(maps.Keys(want)) {
		if got[lower] == nil {
			return fmt.Sprintf("table %s missing", want[lower].name)
		}
	}
	for _, lower := range slices.Sorted(maps.Keys(got)) {
		g, w := got[lower], want[lower]
		if w == nil {
			return fmt.Sprintf("table %s should not exist", g.name)
		}
		if g.name != w.name {
			return fmt.Sprintf("table %s is named %s", w.name, g.name)
		}
		if !slices.EqualFunc(g.acl, w.acl, func(a, b SignedIdentifier) bool {
			return a.ID == b.ID && a.Start.Equal(b.Start) && a.Expiry.Equal(b.Expiry) && a.Permission == b.Permission
		}) {
			return fmt.Sprintf("table %s has ACL %v, want %v", g.name, g.acl, w.acl)
		}
		keys := slices.SortedFunc(maps.Keys(w.ents), func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
		for _, k := range keys {
			if g.ents[k] == nil {
				return fmt.Sprintf("table %s: entity %v (ETag %s) missing", g.name, k, w.ents[k].etag)
			}
		}
		for k, ge := range g.ents {
			we := w.ents[k]
			switch {
			case we == nil:
				return fmt.Sprintf("table %s: entity %v (ETag %s) should not exist", g.name, k, ge.etag)
			case ge.etag != we.etag:
				return fmt.Sprintf("table %s: entity %v has ETag %s, want %s", g.name, k, ge.etag, we.etag)
			case !slices.EqualFunc(ge.props, we.props, func(a, b odata.Property) bool {
				return a.Name == b.Name && a.Value.Identical(b.Value)
			}):
				return fmt.Sprintf("table %s: entity %v has other properties", g.name, k)
			}
		}
	}
	return ""
}

// checkPLRanges checks every live table's range map: contiguous, covering
// the key space, with counts equal to a scan.
func checkPLRanges(ctx context.Context, s *Store) error {
	for _, tb := range s.liveTables() {
		ri, err := s.Ranges(ctx, tb.account, tb.name)
		if err != nil {
			return err
		}
		if ri[0].StartPartitionKey != "" || ri[len(ri)-1].EndPartitionKey != "" {
			return fmt.Errorf("table %s: ranges do not cover the key space: %+v", tb.name, ri)
		}
		for i, x := range ri {
			if i > 0 && x.StartPartitionKey != ri[i-1].EndPartitionKey {
				return fmt.Errorf("table %s: ranges %d and %d not contiguous", tb.name, i-1, i)
			}
			lo, hi := tb.bounds(x.StartPartitionKey, x.EndPartitionKey)
			it := s.db.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
			var n, size int64
			for ok := it.First(); ok; ok = it.Next() {
				n++
				size += int64(len(it.Key()) + len(it.Value()))
			}
			if err := it.Close(); err != nil {
				return err
			}
			if n != x.Entities || size != x.Bytes {
				return fmt.Errorf("table %s range %d [%q, %q): counts %d entities %d bytes, scan %d %d",
					tb.name, i, x.StartPartitionKey, x.EndPartitionKey, x.Entities, x.Bytes, n, size)
			}
		}
	}
	return nil
}

// checkNoOrphans fails if the engine still holds an entity of a table that
// is not live (once the drops have been reclaimed).
func checkNoOrphans(s *Store) error {
	live := map[uint64]bool{}
	for _, tb := range s.liveTables() {
		live[tb.id] = true
	}
	it := s.db.NewIter(&lsm.IterOptions{LowerBound: []byte{nsEntities}, UpperBound: []byte{nsEntities + 1}})
	orphans, id := 0, uint64(0)
	for ok := it.First(); ok; ok = it.Next() {
		k, err := DecodeEntityKey(it.Key())
		if err != nil {
			it.Close()
			return err
		}
		if !live[k.TableID] {
			orphans++
			id = k.TableID
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if orphans > 0 {
		return fmt.Errorf("%d entities of dropped tables (table id %d among them) left after their drop was reclaimed", orphans, id)
	}
	return nil
}
