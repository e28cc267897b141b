package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, nan, 1, 3}, 3},
		{[]float64{10, 1, 1000}, 10}, // one disturbed repeat does not move it
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	for _, in := range [][]float64{nil, {nan, nan}} {
		if got := median(in); !math.IsNaN(got) {
			t.Errorf("median(%v) = %v, want NaN", in, got)
		}
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("median reordered its input: %v", in)
	}
}

func TestRatio(t *testing.T) {
	if got := ratio(3, 4); got != 0.75 {
		t.Errorf("ratio(3, 4) = %v", got)
	}
	for _, c := range [][2]float64{{1, 0}, {0, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := ratio(c[0], c[1]); !math.IsNaN(got) {
			t.Errorf("ratio(%v, %v) = %v, want NaN", c[0], c[1], got)
		}
	}
}

func TestPairRatios(t *testing.T) {
	got := pairRatios([]float64{2, 3, math.NaN()}, []float64{4, 6})
	if len(got) != 3 || got[0] != 0.5 || got[1] != 0.5 || !math.IsNaN(got[2]) {
		t.Errorf("pairRatios = %v, want [0.5 0.5 NaN]", got)
	}
}

// TestSummarize checks medians, tabula/pebble ratios, per-repeat ratios,
// bars and the group-commit verdict on hand-made results.
func TestSummarize(t *testing.T) {
	rep := &engineReport{
		Repeats:   3,
		Engines:   []string{"tabula", "pebble"},
		Workloads: []string{"readrandom", "fillsync1", "fillsync8"},
	}
	add := func(eng, wl string, ops ...float64) {
		for i, o := range ops {
			rep.Results = append(rep.Results, result{Engine: eng, Workload: wl, Repeat: i + 1, OpsPerSec: o,
				WriteAmp: num(math.NaN()), SpaceAmp: 0.5, PeakRSS: int64(100 * (i + 1))})
		}
	}
	add("tabula", "readrandom", 70, 90, 80)
	add("pebble", "readrandom", 100, 100, 100)
	add("tabula", "fillsync1", 100, 100, 100)
	add("pebble", "fillsync1", 100, 100, 100)
	add("tabula", "fillsync8", 300, 250, 350)
	add("pebble", "fillsync8", 400, 400, 400)
	// Tabula's readrandom has a p99.9 (results recorded before there was
	// one, as Pebble's here, have none).
	for i, p999 := range []num{100, 300, 200} {
		rep.Results[i].P999Micros = p999
	}
	// CPU time on readrandom only: 2, 4 and 3 µs an operation for
	// Tabula, 6 for Pebble.
	for i, cpu := range []float64{0.002, 0.004, 0.003, 0.006, 0.006, 0.006} {
		rep.Results[i].Ops, rep.Results[i].CPUSeconds = 1000, cpu
	}
	// A failed run counts for nothing.
	rep.Results = append(rep.Results, result{Engine: "tabula", Workload: "readrandom", Repeat: 2, OpsPerSec: 1e9, Error: "boom"})
	summarize(rep)

	rr := summaryOf(rep.Summary, "readrandom")
	if got := float64(rr.engine("tabula").OpsPerSec); got != 80 {
		t.Errorf("tabula readrandom median = %v, want 80", got)
	}
	if got := float64(rr.OpsRatio); math.Abs(got-0.8) > 1e-9 {
		t.Errorf("readrandom ratio = %v, want 0.8", got)
	}
	if rr.Pass == nil || !*rr.Pass {
		t.Errorf("readrandom at 0.8 should meet its 0.8 bar")
	}
	want := []float64{0.7, 0.9, 0.8}
	for i, r := range rr.PerRepeatOpsRatio {
		if math.Abs(float64(r)-want[i]) > 1e-9 {
			t.Errorf("per-repeat ratio %d = %v, want %v", i, r, want[i])
		}
	}
	if !math.IsNaN(float64(rr.WriteAmpRatio)) {
		t.Errorf("a read's write-amp ratio = %v, want NaN", rr.WriteAmpRatio)
	}
	if got := float64(rr.RSSRatio); got != 1 {
		t.Errorf("RSS ratio = %v, want 1", got)
	}
	fs8 := summaryOf(rep.Summary, "fillsync8")
	if fs8.Pass == nil || *fs8.Pass {
		t.Errorf("fillsync8 at %v should miss its 0.8 bar", fs8.OpsRatio)
	}
	gc := rep.GroupCommit
	if gc == nil || gc.Pass == nil || *gc.Pass || float64(gc.Scaling[0].Ratio) != 3 {
		t.Errorf("group commit = %+v, want tabula 3x, failing", gc)
	}
	if got := belowBar(rep); len(got) != 1 || got[0] != "fillsync8" {
		t.Errorf("belowBar = %v, want [fillsync8]", got)
	}
	if got := rr.engine("tabula").P999Micros; got != 200 {
		t.Errorf("tabula readrandom p99.9 median = %v, want 200", got)
	}
	if got := rr.engine("tabula").CPUMicrosPerOp; math.Abs(float64(got)-3) > 1e-9 {
		t.Errorf("tabula readrandom CPU per op = %v µs, want 3", got)
	}
	md := rep.markdown()
	if !strings.Contains(md, "| readrandom | 3.00 | 6.00 | **0.50** |") || strings.Contains(md, "| fillsync1 | 0.00 |") {
		t.Errorf("markdown's CPU rows: want readrandom's 3.00 against 6.00, and no row for fillsync1 (no CPU recorded):\n%s", md)
	}
	for _, cell := range []string{"0.0 / 0.0 / 200.0 / 0", "0.0 / 0.0 / – / 0"} {
		if !strings.Contains(md, cell) {
			t.Errorf("markdown lacks the latency cell %q:\n%s", cell, md)
		}
	}
	for _, bad := range []string{"NaN", "%!"} {
		if strings.Contains(md, bad) {
			t.Errorf("markdown contains %q:\n%s", bad, md)
		}
	}
}

// TestReportsKeepCaveats: the engines' configuration and the note on
// Pebble's L6 filters are in the engine suite's RESULTS.md and in the all
// report (built from engine.md), once each; the all report also carries
// the REST suite's durability table and the emulator's version.
func TestReportsKeepCaveats(t *testing.T) {
	rep := &engineReport{Suite: "engine", Command: "go -C bench/peers run . engine", Repeats: 1, Config: defaultEngineConfig(),
		Params: params{N: 1000, Seed: 1}, Engines: []string{"tabula", "pebble", "goleveldb"}, Workloads: []string{"readmissing"},
		Versions: map[string]string{"tabula": "git x", "pebble": "v2 y", "goleveldb": "z"}}
	for _, e := range rep.Engines {
		rep.Results = append(rep.Results, result{Engine: e, Workload: "readmissing", Repeat: 1, OpsPerSec: 1000})
	}
	summarize(rep)
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "engine.md"), []byte(rep.engineMD()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fixedReport().write(out, ""); err != nil {
		t.Fatal(err)
	}
	all := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := writeAllResults(out, all, "go -C bench/peers run . all"); err != nil {
		t.Fatal(err)
	}
	allMD, err := os.ReadFile(all)
	if err != nil {
		t.Fatal(err)
	}
	caveats := []string{"How the engines are configured", "| compression | **S2** (Tabula's default)", "| bloom filter |",
		"| block cache |", "| memtable / write buffer |", "Pebble's `Get` does not consult the bloom filters of L6 tables"}
	for name, doc := range map[string]string{"all": string(allMD), "engine RESULTS.md": rep.resultsDoc("")} {
		for _, c := range caveats {
			if n := strings.Count(doc, c); n != 1 {
				t.Errorf("%s report: %q appears %d times, want once", name, c, n)
			}
		}
	}
	for _, c := range []string{"### Durability: what an acknowledgement means", "azurite 3.35.0 (npm, pinned)", "**Crash clone = a power loss**"} {
		if !strings.Contains(string(allMD), c) {
			t.Errorf("all report lacks %q", c)
		}
	}
}
