package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLargeRunSmoke runs engine -large on a tiny key space through the
// command and its child processes: every workload of the chain has a
// result on both engines, the samples and their report are there.
func TestLargeRunSmoke(t *testing.T) {
	t.Setenv("PEERS_TEST_AS_COMMAND", "1")
	out := t.TempDir()
	args := []string{"engine", "-large", "-n", "20000", "-read-dur", "200ms", "-repeats", "1", "-sample", "10ms",
		"-mem-limit", "0", "-tmpdir", t.TempDir(), "-out", out}
	if err := run(args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(out, "engine.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep engineReport
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Large == nil || len(rep.Large.Runs) != 2 {
		t.Fatalf("large report: %+v", rep.Large)
	}
	for _, run := range rep.Large.Runs {
		if len(run.Samples) == 0 || run.Samples[0].Debt < 0 {
			t.Errorf("%s: samples %+v", run.Engine, run.Samples)
		}
	}
	if got := strings.Join(rep.Workloads, ","); got != largeWorkloads {
		t.Errorf("workloads %s, want the default chain %s", got, largeWorkloads)
	}
	if len(rep.Results) != 2*len(rep.Workloads) {
		t.Fatalf("%d results, want %d", len(rep.Results), 2*len(rep.Workloads))
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.Ops <= 0 || r.Wrong != 0 {
			t.Errorf("%s %s: %+v", r.Engine, r.Workload, r)
		}
		if r.Workload == "fillrandom" && (r.Ops != 20000 || r.DebtAfterDrain != 0) {
			t.Errorf("%s fill: %d ops, debt left %d", r.Engine, r.Ops, r.DebtAfterDrain)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "engine.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "### The large run") || !strings.Contains(string(md), "Memory was not limited") {
		t.Errorf("engine.md has no large run section:\n%s", md)
	}
	svg, err := os.ReadFile(filepath.Join(out, "large-debt.svg"))
	if err != nil {
		t.Fatal(err)
	}
	wellFormedSVG(t, "large-debt.svg", string(svg))
	csv, err := os.ReadFile(filepath.Join(out, "large-series.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(string(csv), "\n"); rows < 3 {
		t.Errorf("large-series.csv has %d lines", rows)
	}
}

// TestLargeRunRefusals: a chain that does not start with a fill, or that
// runs an empty-DB workload after it, is refused before anything runs.
func TestLargeRunRefusals(t *testing.T) {
	for _, wl := range []string{"readrandom,scan", "fillrandom,batch100", "fillrandom,nosuch"} {
		err := run([]string{"engine", "-large", "-workloads", wl, "-out", t.TempDir()}, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("-large -workloads %s was accepted", wl)
		}
	}
}

// TestMemoryCgroup makes and removes a memory cgroup where the machine
// has cgroup v1's memory controller, and otherwise checks that the large
// run says what it needs.
func TestMemoryCgroup(t *testing.T) {
	dir, remove, err := newMemoryCgroup("tabula-bench-test-" + filepath.Base(t.TempDir()))
	if _, statErr := os.Stat(filepath.Join(memoryCgroupRoot, "memory.limit_in_bytes")); statErr != nil {
		if err == nil || !strings.Contains(err.Error(), "-mem-limit 0") {
			t.Fatalf("without the controller: err = %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := limitMemory(dir, 256<<20); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil || strings.TrimSpace(string(b)) != "268435456" {
		t.Errorf("limit reads %q, %v", b, err)
	}
	remove()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there: %v", dir, err)
	}
}

// TestRelDir: the results file links the run's folder whether either path
// is relative or absolute.
func TestRelDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ base, dir, want string }{
		{"..", "../latest/x", "latest/x"},
		{"..", filepath.Join(filepath.Dir(wd), "latest", "x"), "latest/x"},
		{filepath.Dir(wd), "../latest/x", "latest/x"},
	} {
		if got, err := relDir(c.base, c.dir); err != nil || filepath.ToSlash(got) != c.want {
			t.Errorf("relDir(%q, %q) = %q, %v; want %q", c.base, c.dir, got, err, c.want)
		}
	}
}
