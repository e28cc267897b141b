package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {95, 10}, {99, 10}, {10, 1}, {100, 10}, {1, 1}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one value = %v", got)
	}
}

// fixedReport is a report with known runs: three systems, three
// workloads, two repeats, a run in which every operation failed (get), one
// with a few failed operations (update) and a durability test.
func fixedReport() *svcReport {
	rep := &svcReport{Suite: "rest", Command: "go -C bench/peers run . rest -repeats 2", Started: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC),
		Elapsed: 125, Machine: machine{CPU: "Test CPU", Cores: 2, MemTotal: 24 << 30, Kernel: "6.1", GoVersion: "go1.26", DataFS: "ext4"},
		Params: map[string]string{"conns": "16", "dur": "3s", "durability-n": "2000"}, Repeats: 2, Systems: []string{"tabula", "azurite", "floor"}, Workloads: []string{"insert", "get", "update"},
		Notes: []string{"a note"}}
	add := func(sys, wl string, rep0 int, ents int64, secs, cpu float64, errs int64, failure string) {
		run := svcRun{System: sys, Workload: wl, Repeat: rep0, Ops: ents + errs, Entities: ents, Errors: errs, Seconds: secs,
			P50: 1, P95: 2, P99: 4, CPUSeconds: cpu, PeakRSS: 100 << 20, Error: failure}
		if errs > 0 {
			run.FirstError = "HTTP 412: UpdateConditionNotSatisfied"
			if failure != "" {
				run.FirstError = failure
			}
		}
		rep.Runs = append(rep.Runs, run)
	}
	add("tabula", "insert", 0, 30000, 3, 3, 0, "")
	add("azurite", "insert", 0, 3000, 3, 3, 0, "")
	add("tabula", "insert", 1, 36000, 3, 3.6, 0, "")
	add("azurite", "insert", 1, 3000, 3, 3, 0, "")
	add("tabula", "get", 0, 90000, 3, 1.8, 0, "")
	add("azurite", "get", 0, 0, 0, 0, 1, "every operation failed: connection refused")
	add("tabula", "get", 1, 90000, 3, 1.8, 0, "")
	add("azurite", "get", 1, 4500, 3, 4.5, 0, "")
	add("tabula", "update", 0, 30000, 3, 3, 0, "")
	add("azurite", "update", 0, 3000, 3, 3, 0, "")
	add("tabula", "update", 1, 29998, 3, 3, 2, "")
	add("azurite", "update", 1, 3000, 3, 3, 0, "")
	add("floor", "insert", 0, 60000, 3, 3, 0, "") // 50 ms per 1,000; no get runs
	add("floor", "insert", 1, 60000, 3, 3, 0, "")
	add("floor", "update", 0, 60000, 3, 3, 0, "")
	add("floor", "update", 1, 60000, 3, 3, 1, "")
	rep.Durability = []durabilityRun{{System: "tabula", Acknowledged: 100, Survived: 100}, {System: "azurite", Acknowledged: 100, Survived: 40}}
	rep.PowerLoss = []powerLossRun{{System: "tabula", Method: "crash clone", Acknowledged: 2000, Survived: 2000, InFlight: 3},
		{System: "azurite", Method: "computed", IntervalMS: 5000}}
	az := &azuriteInstall{version: "3.35.0", lokijs: "1.5.12", autosaveMS: 5000, autosaveFile: "azurite/dist/src/table/persistence/LokiTableMetadataStore.js"}
	rep.Acks = []ackMeaning{{"tabula", tabulaAck}, {"azurite", az.ackMeaning()}}
	rep.Versions = []string{"azurite 3.35.0 (npm, pinned)", "LokiJS 1.5.12", "Node.js v20.20.2"}
	rep.summarize()
	return rep
}

func TestServiceSummary(t *testing.T) {
	rep := fixedReport()
	ins := rep.Summary[0]
	if ins.Systems[0].EntitiesPerSec != 11000 || ins.Systems[1].EntitiesPerSec != 1000 || ins.ThroughputRatio != 11 {
		t.Fatalf("insert summary: %+v", ins)
	}
	// CPU per 1,000 entities: tabula 100 ms both repeats; azurite 1,000 ms.
	if ins.Systems[0].CPUPer1000 != 100 || ins.Systems[1].CPUPer1000 != 1000 || ins.CPURatio != 10 {
		t.Fatalf("insert CPU: %v %v %v", ins.Systems[0].CPUPer1000, ins.Systems[1].CPUPer1000, ins.CPURatio)
	}
	if fmtRatios(ins.PerRepeatCPU) != "10.00 10.00" || fmtRatios(ins.Systems[0].PerRepeatCPU) != "100.00 100.00" {
		t.Fatalf("insert CPU by repeat: %v, tabula's %v", ins.PerRepeatCPU, ins.Systems[0].PerRepeatCPU)
	}
	if ins.Systems[0].Invalid || ins.Systems[1].Invalid || ins.Systems[2].Invalid {
		t.Fatalf("clean rows marked invalid: %+v", ins)
	}
	// A run in which every operation failed drops out of the medians, and
	// its system's row is invalid: no ratio.
	get := rep.Summary[1]
	if get.Systems[1].Runs != 1 || !get.Systems[1].Invalid || get.Systems[0].Invalid || !math.IsNaN(float64(get.ThroughputRatio)) ||
		!math.IsNaN(float64(get.CPURatio)) || len(get.PerRepeatRatio) != 0 {
		t.Fatalf("a failed repeat must make its row invalid: %+v", get)
	}
	// A few failed operations: the run counts in the medians, its errors
	// are counted, its row is invalid.
	upd := rep.Summary[2]
	if upd.Systems[0].Runs != 2 || upd.Systems[0].Errors != 2 || !upd.Systems[0].Invalid || upd.Systems[1].Invalid ||
		!math.IsNaN(float64(upd.ThroughputRatio)) || !upd.Systems[2].Invalid {
		t.Fatalf("failed operations must make the row invalid: %+v", upd)
	}
}

// TestServiceReportGolden renders a fixed report and compares it with
// testdata/service_report.golden.md (go test -update rewrites it).
func TestServiceReportGolden(t *testing.T) {
	got := fixedReport().markdown("")
	path := filepath.Join("testdata", "service_report.golden.md")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("report differs from %s (go test -update to accept):\n%s", path, got)
	}
}

// wellFormedSVG parses a document to its end and checks its root.
func wellFormedSVG(t *testing.T, name, doc string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
			if se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("%s: root namespace %q", name, se.Name.Space)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q", name, root)
	}
}

func TestChartsAreWellFormedSVG(t *testing.T) {
	charts := fixedReport().charts()
	if len(charts) != 3 {
		t.Fatalf("%d charts", len(charts))
	}
	for name, c := range charts {
		doc := c.svg()
		wellFormedSVG(t, name, doc)
		if !strings.Contains(doc, "<rect") || !strings.Contains(doc, "tabula") {
			t.Errorf("%s has no bars or no legend", name)
		}
	}
	// Hostile labels are escaped, empty and linear charts render.
	wellFormedSVG(t, "escaped", barChart{Title: `<&"'>`, Series: []string{"a<b"}, Category: []string{"x&y"}, Values: [][]float64{{1}}}.svg())
	wellFormedSVG(t, "empty", barChart{Title: "none"}.svg())
	wellFormedSVG(t, "nan", barChart{Series: []string{"a"}, Category: []string{"x"}, Values: [][]float64{{math.NaN()}}, Log: true}.svg())
}

// TestTableSuiteSmoke runs the table suite with tiny sizes through the
// command and checks the report it writes.
func TestTableSuiteSmoke(t *testing.T) {
	out := t.TempDir()
	if err := run([]string{"table", "-repeats", "1", "-dur", "200ms", "-data-n", "500", "-workers", "4", "-out", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	checkSuiteOutput(t, filepath.Join(out, "table"), "table", []string{"table", "lsm"})
}

// TestRESTSuiteSmoke runs the REST suite with tiny sizes on all three
// systems, installing the pinned Azurite into the default cache folder
// when it is not there. Without Node.js and npm, or when the install
// fails, it fails: .ci/run installs Node.js, so the comparison with the
// emulator is part of every CI run. -short skips it, saying so.
func TestRESTSuiteSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the REST smoke run builds Tabula, installs Azurite with npm and runs every REST workload")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the REST suite compares Tabula with the Azurite emulator, which needs Node.js and npm (.ci/run installs them; go test -short skips this test)", tool)
		}
	}
	t.Setenv("PEERS_TEST_AS_COMMAND", "1") // the floor server is this binary re-executed
	systems := "tabula,azurite,floor"
	out := t.TempDir()
	var log bytes.Buffer
	args := []string{"rest", "-systems", systems, "-repeats", "1", "-dur", "200ms", "-data-n", "200", "-scan-n", "500",
		"-durability-n", "50", "-conns", "4", "-out", out}
	if err := run(args, io.Discard, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	checkSuiteOutput(t, filepath.Join(out, "rest"), "rest", strings.Split(systems, ","))
	md, _ := os.ReadFile(filepath.Join(out, "rest", "report.md"))
	for _, want := range []string{"azurite " + azuriteVersion + " (npm, pinned)", "`autosaveInterval: ", "computed, not measured: up to **"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(string(md), "| 50 / 50 / **0** |") {
		t.Errorf("Tabula lost acknowledged inserts in the kill -9 test:\n%s", md)
	}
	if !regexp.MustCompile(`\| ([0-9]+) / ([0-9]+) / \*\*0\*\*, measured on a crash clone`).Match(md) {
		t.Errorf("Tabula lost acknowledged inserts in the power-loss test:\n%s", md)
	}
	// The floor answers every workload but the scan, without an error.
	if !regexp.MustCompile(`\| get \| floor \| [0-9.]+k? \|.* \| 0 \|`).Match(md) ||
		!regexp.MustCompile(`\| scan \| floor \| — \|`).Match(md) {
		t.Errorf("floor rows:\n%s", md)
	}
}

// TestRESTSuiteClusterSmoke runs the REST suite's -cluster mode small: a
// three-node cluster beside the single node, every workload, the kill -9
// test and one kill of the written range's leaseholder, with nothing
// acknowledged lost.
func TestRESTSuiteClusterSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster smoke run builds Tabula and starts three-node clusters")
	}
	out := t.TempDir()
	var log bytes.Buffer
	args := []string{"rest", "-cluster", "3", "-kills", "1", "-repeats", "1", "-dur", "200ms", "-data-n", "200", "-scan-n", "500",
		"-durability-n", "50", "-conns", "4", "-out", out}
	if err := run(args, io.Discard, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	checkSuiteOutput(t, filepath.Join(out, "rest"), "rest", []string{clusterSystem, "tabula"})
	data, err := os.ReadFile(filepath.Join(out, "rest", "rest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep svcReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	fo := rep.Failover
	if fo == nil || fo.Error != "" || len(fo.Kills) != 1 || fo.Kills[0].Error != "" || fo.Kills[0].FailoverMS <= 0 || fo.Kills[0].CatchUpMS <= 0 {
		t.Fatalf("failover: %+v", fo)
	}
	// The kill is of the written range's leaseholder, so no write is
	// acknowledged before its group elects another leader, which its
	// followers start only an election timeout (1 s at the default ticks)
	// after they last heard it. A kill of another node costs the
	// writers one refused connection each: milliseconds.
	if fo.Kills[0].FailoverMS < 500 {
		t.Errorf("failover took %.0f ms: the node killed did not hold the range's lease", fo.Kills[0].FailoverMS)
	}
	if fo.Acknowledged == 0 || fo.Survived != fo.Acknowledged {
		t.Errorf("failover: %d inserts acknowledged, %d found", fo.Acknowledged, fo.Survived)
	}
	md, _ := os.ReadFile(filepath.Join(out, "rest", "report.md"))
	if !strings.Contains(string(md), "| cluster | in the raft log of a quorum") || !strings.Contains(string(md), "| 50 / 50 / **0** |") {
		t.Errorf("the cluster's durability row:\n%s", md)
	}
}

// TestRESTSuiteLimitsSmoke runs the limits phase alone at small rates:
// the hot partition and the account must each be held within ±10% of
// their limits, with every answer either served or ServerBusy. The
// account's rate is high enough that its bucket (100 ms of it) holds ten
// batches: at 1,000/s it holds one, which the hot partition's singles
// keep draining, and the batches then reach only about 0.9 of the limit.
func TestRESTSuiteLimitsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the limits smoke run builds Tabula and loads it for three seconds")
	}
	out := t.TempDir()
	var log bytes.Buffer
	args := []string{"rest", "-workloads", "", "-emulate-limits", "-partition-rate", "500", "-account-rate", "10000",
		"-limits-secs", "3", "-durability-n", "0", "-conns", "4", "-out", out}
	if err := run(args, io.Discard, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	data, err := os.ReadFile(filepath.Join(out, "rest", "rest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep svcReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	lr := rep.Limits
	if lr == nil || !lr.held() || lr.Errors != 0 || len(lr.Timeline) != 3 {
		t.Fatalf("limits: %+v", lr)
	}
	var refused int64
	for _, s := range lr.Timeline {
		refused += s.HotRefused + s.ScatteredRefused
	}
	if refused == 0 {
		t.Errorf("nothing was refused: the writers never reached the limits (%+v)", lr.Timeline)
	}
	svg, err := os.ReadFile(filepath.Join(out, "rest", "limits.svg"))
	if err != nil {
		t.Fatal(err)
	}
	wellFormedSVG(t, "limits.svg", string(svg))
}

func checkSuiteOutput(t *testing.T, dir, suite string, systems []string) {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sys := range systems {
		if !strings.Contains(string(md), "| "+sys+" |") {
			t.Errorf("report.md has no row for %s", sys)
		}
	}
	if strings.Contains(string(md), ": invalid**") || strings.Contains(string(md), "invalid:") || strings.Contains(string(md), "### Errors") {
		t.Errorf("the report has invalid rows:\n%s", md)
	}
	for _, name := range []string{suite + ".json", "throughput.svg", "latency.svg", "cpu.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".svg") {
			wellFormedSVG(t, name, string(data))
		}
	}
	// Every system ran every workload (the floor all but the scan) in
	// every repeat, and not one operation failed.
	data, err := os.ReadFile(filepath.Join(dir, suite+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep svcReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	for _, wl := range rep.Workloads {
		for _, sys := range systems {
			if isFloor(sys) && !floorWorkloads[wl] {
				continue
			}
			runs := 0
			for _, r := range rep.Runs {
				if r.System != sys || r.Workload != wl {
					continue
				}
				runs++
				if r.Errors != 0 || r.Error != "" || r.Ops <= 0 || r.Entities <= 0 {
					t.Errorf("%s/%s repeat %d: %d errors of %d ops, %d entities: %s %s", sys, wl, r.Repeat, r.Errors, r.Ops, r.Entities, r.Error, r.FirstError)
				}
			}
			if runs != rep.Repeats {
				t.Errorf("%s/%s: %d runs, want %d", sys, wl, runs, rep.Repeats)
			}
		}
	}
	if len(rep.Workloads) == 0 || len(rep.Runs) == 0 {
		t.Errorf("no workloads or runs in %s.json", suite)
	}
}

func TestEngineChartIsWellFormedSVG(t *testing.T) {
	rep := &engineReport{Engines: []string{"tabula", "pebble"}, Summary: []workloadSummary{
		{Workload: "fillseq", Engines: []engineSummary{{Engine: "tabula", OpsPerSec: 1e5}, {Engine: "pebble", OpsPerSec: 2e5}}},
		{Workload: "scan", Engines: []engineSummary{{Engine: "tabula", OpsPerSec: num(math.NaN())}}},
	}}
	doc := rep.throughputChart().svg()
	wellFormedSVG(t, "engine-throughput.svg", doc)
	if strings.Count(doc, "<rect x=") < 3 { // background, two bars
		t.Fatalf("chart has too few bars:\n%s", doc)
	}
}
