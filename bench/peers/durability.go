package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// The REST suite's durability figures. kill -9 ends a server process but
// keeps the kernel's page cache: it shows what a process crash loses, and
// cannot tell a write that was fsynced from one still in the page cache. A
// power loss takes the page cache too. It cannot be caused on a shared
// machine, so for Tabula it is simulated on vfs.MemFS, whose crash clone
// keeps only what was fsynced; for the emulator, which never fsyncs, the
// loss is computed from its autosave interval and measured insert rate.

// durability acknowledges n single inserts, kills the server with
// SIGKILL right after the last acknowledgement, restarts it on the same
// data and counts what survived.
func durability(kind serverKind, tmp string, n, conns int) durabilityRun {
	out := durabilityRun{System: kind.name}
	dir, err := os.MkdirTemp(tmp, "durability-"+kind.name+"-")
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(kind, dir)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	c := newTableClient(srv.endpoint, conns)
	if r, err := c.do("POST", "/Tables", "application/json", []byte(`{"TableName":"durable"}`)); err != nil || !r.ok() {
		srv.kill()
		out.Error = fmt.Sprintf("create table: %v %d", err, r.status)
		return out
	}
	acked := make([]atomic.Bool, n)
	drive(conns, 0, n, func(w, i int) (int, bool, error) {
		r, err := c.do("POST", "/durable", "application/json", benchEntityJSON("p", fmt.Sprintf("r%07d", i), i), "Prefer", "return-no-content")
		ok := err == nil && r.ok()
		acked[i].Store(ok)
		return 1, ok, err
	})
	srv.kill()
	srv, err = startServer(kind, dir)
	if err != nil {
		out.Error = "restart: " + err.Error()
		return out
	}
	defer srv.stop()
	c = newTableClient(srv.endpoint, conns)
	// A server still coming up (a cluster's groups electing their
	// leaders) answers 503 or not at all: that is not a lost write, so
	// such reads are asked again for a while; a 404 is a loss.
	deadline := time.Now().Add(30 * time.Second)
	for i := range acked {
		if !acked[i].Load() {
			continue
		}
		out.Acknowledged++
		for {
			r, err := c.do("GET", entityPath("durable", "p", fmt.Sprintf("r%07d", i)), "", nil)
			if err == nil && r.ok() {
				out.Survived++
				break
			}
			if (err == nil && r.status != http.StatusServiceUnavailable) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

// powerLossRun is a power loss, simulated (Tabula) or computed (the
// emulator).
type powerLossRun struct {
	System string `json:"system"`
	Method string `json:"method"` // "crash clone" (measured) or "computed"
	// Measured: inserts acknowledged before the power cut, and how many a
	// store reopened on what the cut left holds.
	Acknowledged int `json:"acknowledged,omitempty"`
	Survived     int `json:"survived,omitempty"`
	InFlight     int `json:"in_flight,omitempty"` // inserts under way at the cut
	// Computed: at most IntervalMS of acknowledged inserts at the
	// median insert rate the suite measured (RateWorkload), filled by
	// summarize.
	IntervalMS   int    `json:"interval_ms,omitempty"`
	RateWorkload string `json:"rate_workload,omitempty"`
	Rate         num    `json:"rate,omitempty"`
	Lost         num    `json:"lost,omitempty"`
	Error        string `json:"error,omitempty"`
}

// ackMeaning says what a system's acknowledgement of a write means.
type ackMeaning struct {
	System  string `json:"system"`
	Meaning string `json:"meaning"`
}

// powerLossTabula writes through Tabula's table service with `tabula
// serve`'s store options (partition.Open defaults: every write synced) on
// an in-memory filesystem: conns writers insert single entities until n
// are acknowledged, and then, with the writers still going, the
// filesystem is cut as a power loss would cut it (vfs.MemFS.CrashClone:
// only fsynced data and directory entries survive, unsynced tails are
// torn at random points). A store reopened on the clone must hold every
// insert acknowledged before the cut.
func powerLossTabula(n, conns int, seed uint64) powerLossRun {
	out := powerLossRun{System: "tabula", Method: "crash clone"}
	ctx := context.Background()
	const dir = "/tabula-data"
	mem := vfs.NewMem()
	s, err := partition.Open(dir, &partition.Options{LSM: lsm.Options{FS: mem}})
	if err != nil {
		out.Error = err.Error()
		return out
	}
	if _, err := s.CreateTable(ctx, devAccount, "durable"); err != nil {
		s.Close()
		out.Error = err.Error()
		return out
	}
	limit := 20*n + conns // writers stop here if the cut comes late
	acked := make([]atomic.Bool, limit)
	var next, count, started atomic.Int64
	var stop atomic.Bool
	cut := make(chan struct{})
	var cutOnce sync.Once
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range conns {
		wg.Go(func() {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= limit {
					cutOnce.Do(func() { close(cut) })
					return
				}
				started.Add(1)
				_, err := s.InsertEntity(ctx, devAccount, "durable", benchEntity("p", fmt.Sprintf("r%07d", i), i))
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				acked[i].Store(true)
				if count.Add(1) == int64(n) {
					cutOnce.Do(func() { close(cut) })
				}
			}
		})
	}
	<-cut
	// Every insert marked acknowledged now returned before the clone.
	before := make([]bool, limit)
	for i := range acked {
		before[i] = acked[i].Load()
	}
	inFlight := started.Load() - count.Load()
	clone := mem.CrashClone(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
	stop.Store(true)
	wg.Wait()
	s.Close()
	if e := firstErr.Load(); e != nil {
		out.Error = "insert: " + e.(string)
		return out
	}
	out.InFlight = int(inFlight)
	r, err := partition.Open(dir, &partition.Options{LSM: lsm.Options{FS: clone}})
	if err != nil {
		out.Error = "reopen after the cut: " + err.Error()
		return out
	}
	defer r.Close()
	for i, ok := range before {
		if !ok {
			continue
		}
		out.Acknowledged++
		if _, err := r.GetEntity(ctx, devAccount, "durable", "p", fmt.Sprintf("r%07d", i)); err == nil {
			out.Survived++
		}
	}
	return out
}

// computePowerLoss fills the computed power-loss rows from the summary:
// the median single-insert rate of the system on the insert workload.
func (rep *svcReport) computePowerLoss() {
	for i := range rep.PowerLoss {
		p := &rep.PowerLoss[i]
		if p.Method != "computed" {
			continue
		}
		p.RateWorkload, p.Rate, p.Lost = "insert", nan(), nan()
		for _, s := range rep.Summary {
			if s.Workload != "insert" {
				continue
			}
			for _, sys := range s.Systems {
				if sys.System == p.System && !sys.Invalid && !math.IsNaN(float64(sys.EntitiesPerSec)) {
					p.Rate = sys.EntitiesPerSec
					p.Lost = num(float64(sys.EntitiesPerSec) * float64(p.IntervalMS) / 1000)
				}
			}
		}
	}
}

// writeDurability renders what an acknowledgement means, the kill -9
// test and the power loss, per system.
func (rep *svcReport) writeDurability(b *strings.Builder) {
	if len(rep.Acks) == 0 && len(rep.Durability) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### Durability: what an acknowledgement means\n\n")
	fmt.Fprintf(b, "| system | an acknowledged write is | kill -9 and restart (process crash, measured): acknowledged / survived / lost | power loss: acknowledged / survived / lost |\n|---|---|---|---|\n")
	systems := []string{}
	for _, a := range rep.Acks {
		systems = append(systems, a.System)
	}
	for _, d := range rep.Durability {
		if !strings.Contains(","+strings.Join(systems, ",")+",", ","+d.System+",") {
			systems = append(systems, d.System)
		}
	}
	for _, sys := range systems {
		meaning := "—"
		for _, a := range rep.Acks {
			if a.System == sys {
				meaning = a.Meaning
			}
		}
		kill := "not run"
		for _, d := range rep.Durability {
			if d.System != sys {
				continue
			}
			if d.Error != "" {
				kill = "failed: " + d.Error
			} else {
				kill = fmt.Sprintf("%d / %d / **%d**", d.Acknowledged, d.Survived, d.Acknowledged-d.Survived)
			}
		}
		power := "not simulated"
		for _, p := range rep.PowerLoss {
			if p.System != sys {
				continue
			}
			switch {
			case p.Error != "":
				power = "failed: " + p.Error
			case p.Method == "computed" && math.IsNaN(float64(p.Lost)):
				power = fmt.Sprintf("computed, not measured: every insert of the last %s of autosave interval (no valid insert rate measured)", fmtMS(p.IntervalMS))
			case p.Method == "computed":
				power = fmt.Sprintf("computed, not measured: up to **%s** lost (%s autosave interval × %s inserts/s, its median on %s); more while the unsynced save waits for writeback",
					fmtOps(float64(p.Lost)), fmtMS(p.IntervalMS), fmtOps(float64(p.Rate)), p.RateWorkload)
			default:
				power = fmt.Sprintf("%d / %d / **%d**, measured on a crash clone (%d inserts in flight at the cut)", p.Acknowledged, p.Survived, p.Acknowledged-p.Survived, p.InFlight)
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", sys, meaning, kill, power)
	}
	fmt.Fprintf(b, "\nWhich test shows what. **kill -9 = a process crash**: it ends the server process and keeps the kernel's page cache, "+
		"so a write the server had handed to the kernel survives it whether or not it was fsynced. **Crash clone = a power loss**, which "+
		"takes the page cache too and cannot be caused on a shared machine: for Tabula, single inserts of the same entities from %s writers "+
		"go through its table service (`partition.Open` with `tabula serve`'s defaults) on `vfs.MemFS`, which `CrashClone` cuts once %s "+
		"are acknowledged, the writers still running, keeping only fsynced file data and directory entries (unsynced tails torn at random "+
		"points); the store reopened on what is left must hold every insert acknowledged before the cut. For the emulator, which never "+
		"fsyncs, a power loss is computed, not measured: the inserts acknowledged since its last autosave (interval × its median insert "+
		"rate), and more if the power fails before the kernel has written the last save back.\n", rep.Params["conns"], rep.Params["durability-n"])
}

// fmtMS renders milliseconds as seconds when whole.
func fmtMS(ms int) string {
	if ms%1000 == 0 {
		return fmt.Sprintf("%d s", ms/1000)
	}
	return fmt.Sprintf("%d ms", ms)
}
