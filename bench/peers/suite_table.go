package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"

	"github.com/tabuladb/tabula/internal/rusage"
)

// The table suite measures what the table layer costs over the raw
// engine: the same operations through partition.Store ("table") and as
// plain key-value operations on an lsm.DB ("lsm") holding the same keys
// and stored values.

const benchTable = "bench"

// tableSystem is one side of the comparison.
type tableSystem interface {
	insert(pk, rk string, e *odata.Entity) error
	get(pk, rk string) error
	update(pk, rk string, e *odata.Entity) error
	batch(pk string, es []*odata.Entity) error
	// scan reads the entities of one partition, or with pk "" those of
	// the loaded partitions (PartitionKey "p..."), and returns how many it
	// returned; filter is applied where the system can.
	scan(pk, filter string) (int, error)
	close() error
}

type storeSystem struct{ s *partition.Store }

func (t storeSystem) insert(pk, rk string, e *odata.Entity) error {
	_, err := t.s.InsertEntity(context.Background(), devAccount, benchTable, e)
	return err
}
func (t storeSystem) get(pk, rk string) error {
	_, err := t.s.GetEntity(context.Background(), devAccount, benchTable, pk, rk)
	return err
}
func (t storeSystem) update(pk, rk string, e *odata.Entity) error {
	_, err := t.s.UpdateEntity(context.Background(), devAccount, benchTable, e, "*")
	return err
}
func (t storeSystem) batch(pk string, es []*odata.Entity) error {
	ops := make([]partition.Op, len(es))
	for i, e := range es {
		ops[i] = partition.Op{Kind: partition.OpInsert, Entity: e}
	}
	_, err := t.s.ExecuteBatch(context.Background(), devAccount, benchTable, ops)
	return err
}
func (t storeSystem) scan(pk, filter string) (int, error) {
	if pk != "" {
		filter = "PartitionKey eq '" + pk + "'"
	} else {
		filter = "PartitionKey ge 'p' and PartitionKey lt 'q' and " + filter
	}
	n := 0
	q := partition.EntityQuery{Filter: filter}
	for {
		c, err := t.s.QueryEntities(context.Background(), devAccount, benchTable, q, func(*partition.StoredEntity) error { n++; return nil })
		if err != nil || c.IsZero() {
			return n, err
		}
		q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
	}
}
func (t storeSystem) close() error { return t.s.Close() }

type lsmSystem struct{ db *lsm.DB }

func lsmKey(pk, rk string) []byte {
	return partition.AppendEntityKey(nil, devAccount, 1, pk, rk)
}
func (l lsmSystem) insert(pk, rk string, e *odata.Entity) error {
	return l.db.Set(lsmKey(pk, rk), odata.EncodeEntity(e), nil)
}
func (l lsmSystem) get(pk, rk string) error {
	_, err := l.db.Get(lsmKey(pk, rk))
	return err
}
func (l lsmSystem) update(pk, rk string, e *odata.Entity) error { return l.insert(pk, rk, e) }
func (l lsmSystem) batch(pk string, es []*odata.Entity) error {
	b := l.db.NewBatch()
	for _, e := range es {
		b.Set(lsmKey(pk, e.RowKey), odata.EncodeEntity(e))
	}
	return l.db.Apply(b, nil)
}
func (l lsmSystem) scan(pk, _ string) (int, error) {
	// The key encoding preserves tuple order: (pk+"\x00", "") is past
	// every key of partition pk, ("q", "") past every "p..." partition.
	lo, hi := lsmKey("p", ""), lsmKey("q", "")
	if pk != "" {
		lo, hi = lsmKey(pk, ""), lsmKey(pk+"\x00", "")
	}
	it := l.db.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}
func (l lsmSystem) close() error { return l.db.Close() }

func benchEntity(pk, rk string, n int) *odata.Entity {
	d, err := odata.DecodeEntityJSON(benchEntityJSON(pk, rk, n))
	if err != nil {
		panic(err) // the benchmark's own entity always decodes
	}
	return &d.Entity
}

func openTableSystem(name, dir string) (tableSystem, error) {
	switch name {
	case "table":
		s, err := partition.Open(dir, nil)
		if err != nil {
			return nil, err
		}
		if _, err := s.CreateTable(context.Background(), devAccount, benchTable); err != nil {
			s.Close()
			return nil, err
		}
		return storeSystem{s}, nil
	case "lsm":
		db, err := lsm.Open(dir, nil)
		return lsmSystem{db}, err
	}
	return nil, fmt.Errorf("unknown system %q: want table or lsm", name)
}

func tableWorkloadNames() []string {
	return []string{"insert", "get", "update", "batch100", "partquery", "scan"}
}

// runTableRepeat fills a fresh system and measures each workload.
func runTableRepeat(name, tmp string, repeat, workers int, dur time.Duration, ops, dataN int, workloads []string) ([]svcRun, error) {
	dir, err := os.MkdirTemp(tmp, "table-"+name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	resetPeakRSS() // the peak is this system's, not the one before
	sys, err := openTableSystem(name, dir)
	if err != nil {
		return nil, err
	}
	defer sys.close()
	// The data set: partitions of 100 entities, loaded in batches.
	for p := range dataN / 100 {
		pk := fmt.Sprintf("p%05d", p)
		es := make([]*odata.Entity, 100)
		for j := range es {
			es[j] = benchEntity(pk, fmt.Sprintf("r%03d", j), p*100+j)
		}
		if err := sys.batch(pk, es); err != nil {
			return nil, err
		}
	}
	var seq atomic.Int64
	random := func() (string, string) {
		k := rand.IntN(dataN / 100 * 100)
		return fmt.Sprintf("p%05d", k/100), fmt.Sprintf("r%03d", k%100)
	}
	opsOf := map[string]loadOp{
		"insert": func(w, i int) (int, bool, error) {
			n := seq.Add(1)
			pk, rk := fmt.Sprintf("w%02d", w), fmt.Sprintf("n%09d", n)
			err := sys.insert(pk, rk, benchEntity(pk, rk, int(n)))
			return 1, err == nil, err
		},
		"get": func(w, i int) (int, bool, error) {
			err := sys.get(random())
			return 1, err == nil, err
		},
		"update": func(w, i int) (int, bool, error) {
			pk, rk := random()
			err := sys.update(pk, rk, benchEntity(pk, rk, i))
			return 1, err == nil, err
		},
		"batch100": func(w, i int) (int, bool, error) {
			pk := fmt.Sprintf("b%09d", seq.Add(1))
			es := make([]*odata.Entity, 100)
			for j := range es {
				es[j] = benchEntity(pk, fmt.Sprintf("r%03d", j), j)
			}
			err := sys.batch(pk, es)
			return 100, err == nil, err
		},
		"partquery": func(w, i int) (int, bool, error) {
			pk, _ := random()
			n, err := sys.scan(pk, "")
			if err == nil && n != 100 {
				err = fmt.Errorf("partition %s: %d entities, want 100", pk, n)
			}
			return n, err == nil, err
		},
		"scan": func(w, i int) (int, bool, error) {
			// Every loaded entity is read to apply the filter.
			_, err := sys.scan("", "Tag eq 'tag5' and Count ge 0")
			return dataN / 100 * 100, err == nil, err
		},
	}
	var runs []svcRun
	for _, wl := range workloads {
		op, ok := opsOf[wl]
		if !ok {
			return nil, fmt.Errorf("unknown workload %q", wl)
		}
		w := workers
		if wl == "scan" {
			w = 1
		}
		cpu0 := rusage.CPU().Seconds()
		res := drive(w, dur, ops, op)
		run := res.run(name, wl, repeat)
		run.CPUSeconds = rusage.CPU().Seconds() - cpu0
		if hwm, _, err := memStatus(); err == nil {
			run.PeakRSS = hwm
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// runTableSuite is the table subcommand. Both systems run in this process,
// one after the other, so CPU and RSS are this process's.
func runTableSuite(args []string, log io.Writer) error {
	var c common
	fs := flag.NewFlagSet("table", flag.ContinueOnError)
	fs.SetOutput(log)
	c.register(fs)
	systems := fs.String("systems", "table,lsm", "systems, in the order each repeat runs them; ratios are the first against the second")
	workloads := fs.String("workloads", strings.Join(tableWorkloadNames(), ","), "workloads to run")
	workers := fs.Int("workers", 16, "concurrent goroutines (the scan uses one)")
	dur := fs.Duration("dur", 3*time.Second, "duration of each measured phase")
	ops := fs.Int("ops", 0, "operations per phase (0: until -dur)")
	dataN := fs.Int("data-n", 100_000, "entities loaded before the phases, in partitions of 100")
	results := fs.String("results", "", "also write the report to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if *dataN < 100 || *workers < 1 {
		return errors.New("-data-n must be at least 100 and -workers positive")
	}
	env, err := c.setup(log)
	if err != nil {
		return err
	}
	rep := &svcReport{Suite: "table", Command: commandLine("table", args), Started: time.Now(), Repeats: c.repeats,
		Machine: describeMachine(env.run.tmpRoot), Systems: splitList(*systems), Workloads: splitList(*workloads),
		Params: map[string]string{"workers": strconv.Itoa(*workers), "dur": dur.String(), "ops": strconv.Itoa(*ops), "data-n": strconv.Itoa(*dataN)},
		Notes: []string{"table: partition.Store (validation, ETags, conditions, latches, stored encoding); lsm: lsm.DB Set/Get/Apply/iterators on the same keys and stored values; every write synced on both",
			"CPU is this process's: both systems run in it, one at a time; the scan applies the filter on table only (lsm just iterates)"}}
	prog := newProgress(c.repeats * len(rep.Systems))
	for r := range c.repeats {
		for _, sys := range rep.Systems {
			prog.start(fmt.Sprintf("repeat %d, %s", r+1, sys))
			runs, err := runTableRepeat(sys, env.run.tmpRoot, r, *workers, *dur, *ops, *dataN, rep.Workloads)
			prog.finish()
			if err != nil {
				return fmt.Errorf("%s repeat %d: %w", sys, r, err)
			}
			rep.Runs = append(rep.Runs, runs...)
		}
	}
	rep.Elapsed = time.Since(rep.Started).Seconds()
	rep.summarize()
	path, err := rep.write(env.out, *results)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "table suite: %s\n", path)
	return rep.errorsErr()
}
