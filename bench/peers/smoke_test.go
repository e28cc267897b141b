package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the command: the child
// mechanism test re-executes it with this variable set.
func TestMain(m *testing.M) {
	if os.Getenv("PEERS_TEST_AS_COMMAND") == "1" {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func smokeParams() params {
	return params{N: 2000, Seed: 1, SyncOps: 150, SyncDur: 10 * time.Second}
}

// TestSmoke runs every workload on every engine (and variant) on a tiny key space, in
// process, through runChild: the results must be sane and every read right.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs every engine workload on every engine, 27 small benchmarks")
	}
	p := smokeParams()
	for _, w := range allWorkloads() {
		for _, eng := range knownEngines() {
			t.Run(w.Name+"/"+eng, func(t *testing.T) {
				res, err := runChild(childSpec{Engine: eng, Workload: w.Name, Repeat: 1, Dir: t.TempDir(), Params: p, Config: defaultEngineConfig()})
				if err != nil {
					t.Fatal(err)
				}
				if res.Ops <= 0 || res.Seconds <= 0 || res.OpsPerSec <= 0 || res.Wrong != 0 {
					t.Fatalf("insane result: %+v", res)
				}
				wantOps := int64(p.N)
				if strings.HasPrefix(w.Name, "fillsync") {
					wantOps = int64(p.SyncOps)
				}
				if res.Ops != wantOps {
					t.Errorf("ops = %d, want %d", res.Ops, wantOps)
				}
				if w.Name == "scan" && res.Entries < res.Ops*scanLen*9/10 {
					t.Errorf("scan visited %d entries in %d scans", res.Entries, res.Ops)
				}
				if !w.Prefill || w.Name == "overwrite" {
					if res.LogicalBytes != res.Ops*entryLen || res.IO.WriteBytes <= 0 || float64(res.WriteAmp) <= 0 {
						t.Errorf("write figures: logical %d, write_bytes %d, write amp %v", res.LogicalBytes, res.IO.WriteBytes, res.WriteAmp)
					}
				}
				if res.DiskBytes <= 0 || float64(res.SpaceAmp) <= 0 || res.PeakRSS <= 0 || res.PeakRSSProcess < res.PeakRSS {
					t.Errorf("space/memory figures: du %d, space amp %v, peak RSS %d (process %d)", res.DiskBytes, res.SpaceAmp, res.PeakRSS, res.PeakRSSProcess)
				}
				if res.EngineStats == nil {
					t.Errorf("no engine stats")
				}
				if res.CPUSeconds <= 0 {
					t.Errorf("CPU time of the measured phase: %v s", res.CPUSeconds)
				}
				if counts := eng != "goleveldb"; counts != (res.Stalls != nil) {
					t.Errorf("stalls %+v: want them counted %v", res.Stalls, counts)
				}
			})
		}
	}
}

// TestEngineBasics checks each adapter's Delete, Get of absent keys and
// batch visibility, which the workloads use only in part.
func TestEngineBasics(t *testing.T) {
	for _, name := range knownEngines() {
		t.Run(name, func(t *testing.T) {
			e, err := openEngine(name, t.TempDir(), defaultEngineConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			k1, k2 := appendKey(nil, 1, false), appendKey(nil, 2, false)
			b := e.NewBatch()
			b.Set(k1, []byte("one"))
			b.Set(k2, []byte("two"))
			if err := b.Apply(true); err != nil {
				t.Fatal(err)
			}
			var got []byte
			if found, err := e.Get(k2, func(v []byte) { got = bytes.Clone(v) }); err != nil || !found || string(got) != "two" {
				t.Fatalf("Get after batch = %q, %v, %v", got, found, err)
			}
			if err := e.Delete(k2, false); err != nil {
				t.Fatal(err)
			}
			if found, err := e.Get(k2, func([]byte) {}); err != nil || found {
				t.Fatalf("Get after Delete: found %v, err %v", found, err)
			}
			if err := e.Settle(); err != nil {
				t.Fatal(err)
			}
			n, err := e.Scan(appendKey(nil, 0, false), 10, func(k, _ []byte) {
				if !bytes.Equal(k, k1) {
					t.Errorf("scan visited %q", k)
				}
			})
			if err != nil || n != 1 {
				t.Fatalf("scan after Delete and Settle: %d entries, err %v", n, err)
			}
		})
	}
}

// liar wraps an engine and corrupts its answers, to prove the read
// workloads count wrong results and fail instead of ignoring them.
type liar struct {
	Engine
	lose  []byte // Get reports present keys with this suffix as missing
	find  bool   // Get reports every missing key as found
	skip  []byte // Scan skips this key
	value []byte // Get returns this value instead
}

func (l *liar) Get(key []byte, fn func([]byte)) (bool, error) {
	if l.lose != nil && bytes.HasSuffix(key, l.lose) {
		return false, nil
	}
	if l.value != nil {
		fn(l.value)
		return true, nil
	}
	found, err := l.Engine.Get(key, fn)
	if l.find && !found {
		fn(make([]byte, valueLen))
		return true, err
	}
	return found, err
}

func (l *liar) Scan(start []byte, limit int, fn func(k, v []byte)) (int, error) {
	return l.Engine.Scan(start, limit, func(k, v []byte) {
		if !bytes.Equal(k, l.skip) {
			fn(k, v)
		}
	})
}

func TestWrongReadsFail(t *testing.T) {
	p := params{N: 500, Seed: 1}
	e, err := openEngine("tabula", t.TempDir(), defaultEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := prefill(e, p); err != nil {
		t.Fatal(err)
	}
	other := make([]byte, valueLen)
	newValueGen(1).fill(other, 7)
	for _, c := range []struct {
		name string
		run  func(Engine, params) (phase, error)
		liar *liar
	}{
		{"lost keys", runReadRandom, &liar{lose: []byte("/rk000042")}},
		{"wrong value", runReadRandom, &liar{value: other}},
		{"found missing key", runReadMissing, &liar{find: true}},
		{"scan skips a key", runScan, &liar{skip: appendKey(nil, 250, false)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.liar.Engine = e
			ph, err := c.run(c.liar, p)
			if err == nil || ph.Wrong == 0 {
				t.Fatalf("wrong reads went unnoticed: wrong %d, err %v", ph.Wrong, err)
			}
			t.Log(err)
		})
	}
	// And the honest engine passes.
	for _, run := range []func(Engine, params) (phase, error){runReadRandom, runReadMissing, runScan} {
		if ph, err := run(e, p); err != nil || ph.Wrong != 0 {
			t.Fatalf("honest reads: wrong %d, err %v", ph.Wrong, err)
		}
	}
}

// TestChildProcess runs one workload through the real child mechanism: a
// re-executed binary, the JSON protocol and the parent's bookkeeping.
func TestChildProcess(t *testing.T) {
	t.Setenv("PEERS_TEST_AS_COMMAND", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{exe: exe, tmpRoot: t.TempDir(), timeout: time.Minute, log: os.Stderr}
	p := smokeParams()
	res, err := r.run(childSpec{Engine: "pebble", Workload: "readmissing", Repeat: 2, Params: p, Config: defaultEngineConfig()})
	if err != nil {
		t.Fatal(err)
	}
	// The child's CPU time is read from its rusage, counted in clock
	// ticks: a run of a few milliseconds may show no user time at all,
	// but never no time (starting a process costs system time).
	if res.Engine != "pebble" || res.Workload != "readmissing" || res.Repeat != 2 || res.Ops != int64(p.N) || res.UserSeconds+res.SysSeconds <= 0 {
		t.Errorf("child result: %+v", res)
	}
	// A failing child is reported as an error with its message.
	_, err = r.run(childSpec{Engine: "nosuch", Workload: "readmissing", Params: p})
	if err == nil || !strings.Contains(err.Error(), "unknown engine") {
		t.Errorf("failing child: err = %v", err)
	}
}
