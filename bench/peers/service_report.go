package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// svcRun is one measured phase of a service suite (table or rest): one
// system, one workload, one repeat.
type svcRun struct {
	System   string  `json:"system"`
	Workload string  `json:"workload"`
	Repeat   int     `json:"repeat"`
	Ops      int64   `json:"ops"`
	Entities int64   `json:"entities"`
	Errors   int64   `json:"errors"` // every non-2xx answer, every failed call
	Seconds  float64 `json:"seconds"`
	// Latency percentiles of single operations, milliseconds.
	P50 num `json:"p50_ms"`
	P95 num `json:"p95_ms"`
	P99 num `json:"p99_ms"`
	// CPUSeconds is the server's user+system CPU over the phase (the REST
	// suite reads the server process's /proc/<pid>/stat; the table suite
	// its own process's).
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSS    int64   `json:"peak_rss"` // the server's VmHWM at the end of the phase
	// FirstError describes the phase's first failed operation; Error is
	// set when none succeeded, and the run then has no figures.
	FirstError string `json:"first_error,omitempty"`
	Error      string `json:"error,omitempty"`
}

// svcSystem is one system's medians over the repeats of a workload.
type svcSystem struct {
	System         string `json:"system"`
	Runs           int    `json:"runs"`
	OpsPerSec      num    `json:"ops_per_sec"`
	EntitiesPerSec num    `json:"entities_per_sec"`
	P50            num    `json:"p50_ms"`
	P95            num    `json:"p95_ms"`
	P99            num    `json:"p99_ms"`
	CPUPer1000     num    `json:"cpu_ms_per_1000_entities"` // server CPU milliseconds per 1,000 entities
	PeakRSS        num    `json:"peak_rss"`
	Errors         int64  `json:"errors"`
	// Invalid is set when any operation of any repeat failed: the
	// figures are shown, but no ratio is computed from them.
	Invalid   bool  `json:"invalid"`
	PerRepeat []num `json:"per_repeat_entities_per_sec"`
	// PerRepeatCPU is CPUPer1000 by repeat: a single run's figure moves
	// with the machine, and the ratio's spread says how far.
	PerRepeatCPU []num `json:"per_repeat_cpu_ms_per_1000_entities"`
}

// svcSummary compares the systems on a workload. The ratios are the first
// system's against the second's: entities/s first/second (higher is
// better for the first), CPU per entity second/first (how many times
// less CPU the first spends). They are NaN (no figure) when either side
// is invalid.
type svcSummary struct {
	Workload        string      `json:"workload"`
	Systems         []svcSystem `json:"systems"`
	ThroughputRatio num         `json:"throughput_ratio"`
	PerRepeatRatio  []num       `json:"per_repeat_throughput_ratio"`
	CPURatio        num         `json:"cpu_ratio"`
	PerRepeatCPU    []num       `json:"per_repeat_cpu_ratio"`
}

// durabilityRun is a kill -9 test of one system: acknowledged inserts,
// SIGKILL, restart, count.
type durabilityRun struct {
	System       string `json:"system"`
	Acknowledged int    `json:"acknowledged"`
	Survived     int    `json:"survived"`
	Error        string `json:"error,omitempty"`
}

// svcReport is a service suite's whole result.
type svcReport struct {
	Suite      string            `json:"suite"`
	Command    string            `json:"command"`
	Started    time.Time         `json:"started"`
	Elapsed    float64           `json:"elapsed_seconds"`
	Machine    machine           `json:"machine"`
	Notes      []string          `json:"notes,omitempty"` // how the systems were run
	Params     map[string]string `json:"params"`
	Repeats    int               `json:"repeats"`
	Systems    []string          `json:"systems"`
	Workloads  []string          `json:"workloads"`
	Runs       []svcRun          `json:"runs"`
	Durability []durabilityRun   `json:"durability,omitempty"` // kill -9
	PowerLoss  []powerLossRun    `json:"power_loss,omitempty"`
	Failover   *failoverReport   `json:"failover,omitempty"` // -cluster
	Limits     *limitsReport     `json:"limits,omitempty"`   // -emulate-limits
	Acks       []ackMeaning      `json:"acknowledgements,omitempty"`
	Versions   []string          `json:"versions,omitempty"` // of the peers, as the report states them
	Summary    []svcSummary      `json:"summary"`
}

// summarize fills Summary from Runs.
func (rep *svcReport) summarize() {
	rep.Summary = nil
	for _, wl := range rep.Workloads {
		s := svcSummary{Workload: wl, ThroughputRatio: nan(), CPURatio: nan()}
		for _, sys := range rep.Systems {
			s.Systems = append(s.Systems, rep.summarizeSystem(sys, wl))
		}
		if len(s.Systems) >= 2 && !s.Systems[0].Invalid && !s.Systems[1].Invalid {
			a, b := s.Systems[0], s.Systems[1]
			s.ThroughputRatio = num(ratio(float64(a.EntitiesPerSec), float64(b.EntitiesPerSec)))
			s.PerRepeatRatio = repeatRatios(a.PerRepeat, b.PerRepeat)
			s.CPURatio = num(ratio(float64(b.CPUPer1000), float64(a.CPUPer1000)))
			s.PerRepeatCPU = repeatRatios(b.PerRepeatCPU, a.PerRepeatCPU)
		}
		rep.Summary = append(rep.Summary, s)
	}
	rep.computePowerLoss()
}

// repeatRatios is x[i]/y[i] for each repeat of x, NaN where y has none.
func repeatRatios(x, y []num) []num {
	out := make([]num, len(x))
	for i := range x {
		out[i] = nan()
		if i < len(y) {
			out[i] = num(ratio(float64(x[i]), float64(y[i])))
		}
	}
	return out
}

func (rep *svcReport) summarizeSystem(sys, wl string) svcSystem {
	out := svcSystem{System: sys}
	var eps, ops, p50, p95, p99, cpu, rss []float64
	out.PerRepeat, out.PerRepeatCPU = make([]num, rep.Repeats), make([]num, rep.Repeats)
	for i := range out.PerRepeat {
		out.PerRepeat[i], out.PerRepeatCPU[i] = nan(), nan()
	}
	for _, r := range rep.Runs {
		if r.System != sys || r.Workload != wl {
			continue
		}
		out.Errors += r.Errors
		if r.Errors > 0 || r.Error != "" {
			out.Invalid = true
		}
		if r.Error != "" || r.Seconds <= 0 {
			continue
		}
		out.Runs++
		e := float64(r.Entities) / r.Seconds
		c := ratio(r.CPUSeconds*1000, float64(r.Entities)/1000)
		if r.Repeat < len(out.PerRepeat) {
			out.PerRepeat[r.Repeat], out.PerRepeatCPU[r.Repeat] = num(e), num(c)
		}
		eps = append(eps, e)
		ops = append(ops, float64(r.Ops)/r.Seconds)
		p50, p95, p99 = append(p50, float64(r.P50)), append(p95, float64(r.P95)), append(p99, float64(r.P99))
		cpu = append(cpu, c)
		rss = append(rss, float64(r.PeakRSS))
	}
	out.EntitiesPerSec, out.OpsPerSec = num(median(eps)), num(median(ops))
	out.P50, out.P95, out.P99 = num(median(p50)), num(median(p95)), num(median(p99))
	out.CPUPer1000, out.PeakRSS = num(median(cpu)), num(median(rss))
	return out
}

// charts are the report's figures.
func (rep *svcReport) charts() map[string]barChart {
	series := rep.Systems
	val := func(f func(svcSystem) num) [][]float64 {
		out := make([][]float64, len(rep.Summary))
		for i, s := range rep.Summary {
			for _, sys := range s.Systems {
				out[i] = append(out[i], float64(f(sys)))
			}
		}
		return out
	}
	var cats []string
	for _, s := range rep.Summary {
		cats = append(cats, s.Workload)
	}
	charts := map[string]barChart{
		"throughput.svg": {Title: rep.Suite + ": entities per second (median)", Unit: "entities/s (log)", Log: true,
			Series: series, Category: cats, Values: val(func(s svcSystem) num { return s.EntitiesPerSec })},
		"cpu.svg": {Title: rep.Suite + ": CPU ms per 1,000 entities (median, lower is better)", Unit: "CPU ms / 1,000 entities (log)", Log: true,
			Series: series, Category: cats, Values: val(func(s svcSystem) num { return s.CPUPer1000 })},
	}
	// Latency: p50, p95 and p99 of each system as the series.
	var latSeries []string
	for _, sys := range series {
		latSeries = append(latSeries, sys+" p50", sys+" p95", sys+" p99")
	}
	lat := make([][]float64, len(rep.Summary))
	for i, s := range rep.Summary {
		for _, sys := range s.Systems {
			lat[i] = append(lat[i], float64(sys.P50), float64(sys.P95), float64(sys.P99))
		}
	}
	if rep.Limits != nil && len(rep.Limits.Timeline) > 0 {
		charts["limits.svg"] = rep.Limits.chart()
	}
	charts["latency.svg"] = barChart{Title: rep.Suite + ": latency percentiles of single operations (median)", Unit: "ms (log)", Log: true,
		Series: latSeries, Category: cats, Values: lat}
	return charts
}

// markdown renders the report. Charts are referenced by file name, so
// the report and its SVGs sit in one folder.
func (rep *svcReport) markdown(chartPrefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Suite %s\n\n", rep.Suite)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Started %s, %s in total; %d repeats, systems interleaved (%s)\n",
		rep.Started.UTC().Format("2006-01-02 15:04 UTC"), time.Duration(rep.Elapsed*float64(time.Second)).Round(time.Second), rep.Repeats, strings.Join(rep.Systems, ", "))
	fmt.Fprintf(&b, "- Machine: %s\n", rep.Machine.describe())
	var keys []string
	for k := range rep.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var ps []string
	for _, k := range keys {
		ps = append(ps, k+"="+rep.Params[k])
	}
	fmt.Fprintf(&b, "- Parameters: %s\n", strings.Join(ps, ", "))
	if len(rep.Versions) > 0 {
		fmt.Fprintf(&b, "- Versions: %s\n", strings.Join(rep.Versions, ", "))
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	a, bsys := "first", "second"
	if len(rep.Systems) >= 2 {
		a, bsys = rep.Systems[0], rep.Systems[1]
	}
	fmt.Fprintf(&b, "\n### Throughput and latency (medians over repeats)\n\n")
	fmt.Fprintf(&b, "A failed operation (a non-2xx answer or a transport error) adds no entities; a row with any is **invalid**: shown, but no ratio is computed from it.\n\n")
	fmt.Fprintf(&b, "| workload | system | entities/s | ops/s | p50 ms | p95 ms | p99 ms | CPU ms / 1k entities | peak RSS MiB | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range rep.Summary {
		for _, sys := range s.Systems {
			errs := strconv.FormatInt(sys.Errors, 10)
			if sys.Invalid {
				errs = "**" + errs + ": invalid**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Workload, sys.System,
				fmtOps(float64(sys.EntitiesPerSec)), fmtOps(float64(sys.OpsPerSec)), fmtFloat(float64(sys.P50), 3),
				fmtFloat(float64(sys.P95), 3), fmtFloat(float64(sys.P99), 3), fmtFloat(float64(sys.CPUPer1000), 1),
				fmtFloat(float64(sys.PeakRSS)/(1<<20), 0), errs)
		}
	}
	fmt.Fprintf(&b, "\n### Ratios, %s against %s\n\n", a, bsys)
	fmt.Fprintf(&b, "| workload | entities/s %s÷%s | per repeat | CPU per entity %s÷%s (× less CPU) | per repeat |\n|---|---:|---|---:|---|\n", a, bsys, bsys, a)
	for _, s := range rep.Summary {
		if inv := invalidSystems(s.Systems[:min(2, len(s.Systems))]); inv != "" {
			fmt.Fprintf(&b, "| %s | — | invalid: %s had errors | — | — |\n", s.Workload, inv)
			continue
		}
		fmt.Fprintf(&b, "| %s | **%s** | %s | **%s** | %s |\n", s.Workload, fmtRatio(s.ThroughputRatio), fmtRatios(s.PerRepeatRatio),
			fmtRatio(s.CPURatio), fmtRatios(s.PerRepeatCPU))
	}
	rep.writeFloorTable(&b)
	rep.writeDurability(&b)
	rep.Failover.write(&b)
	rep.Limits.write(&b, chartPrefix)
	if failed := rep.failures(); len(failed) > 0 {
		fmt.Fprintf(&b, "\n### Errors (their rows are invalid)\n\n- %s\n", strings.Join(failed, "\n- "))
	}
	fmt.Fprintf(&b, "\n![throughput](%sthroughput.svg)\n\n![latency](%slatency.svg)\n\n![CPU per entity](%scpu.svg)\n", chartPrefix, chartPrefix, chartPrefix)
	return b.String()
}

// invalidSystems names the invalid systems among ss, "" if none.
func invalidSystems(ss []svcSystem) string {
	var out []string
	for _, s := range ss {
		if s.Invalid {
			out = append(out, s.System)
		}
	}
	return strings.Join(out, " and ")
}

// errorsErr is the suite's verdict once its report is written: an error
// when any measured operation failed, so that a run with invalid rows
// does not pass for a good one.
func (rep *svcReport) errorsErr() error {
	if failed := rep.failures(); len(failed) > 0 {
		return fmt.Errorf("%d measured phases had failed operations (their rows are marked invalid in the report): %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}

// failures lists every measured phase that had a failed operation.
func (rep *svcReport) failures() []string {
	var out []string
	for _, r := range rep.Runs {
		switch {
		case r.Error != "":
			out = append(out, fmt.Sprintf("%s/%s repeat %d: %s", r.System, r.Workload, r.Repeat, r.Error))
		case r.Errors > 0:
			out = append(out, fmt.Sprintf("%s/%s repeat %d: %d of %d operations failed; the first: %s", r.System, r.Workload, r.Repeat, r.Errors, r.Ops, r.FirstError))
		}
	}
	out = append(out, rep.Failover.failures()...)
	out = append(out, rep.Limits.failures()...)
	return out
}

// floorSystem is the REST suite's bare net/http server answering with
// Tabula's sizes (floor_server.go).
const floorSystem = "floor"

// writeFloorTable compares every system's server CPU per entity with the
// floor's, when the floor ran: a system's multiple of the floor is what its
// own work costs over the transport's, and another system's multiple is
// the most "× less CPU" any server on this transport could show against it.
func (rep *svcReport) writeFloorTable(b *strings.Builder) {
	floor := slices.Index(rep.Systems, floorSystem)
	if floor < 0 || len(rep.Systems) < 2 {
		return
	}
	var others []string
	for _, sys := range rep.Systems {
		if sys != floorSystem {
			others = append(others, sys)
		}
	}
	fmt.Fprintf(b, "\n### Server CPU per entity against the floor (a bare net/http server sending answers of Tabula's length: the transport's own cost)\n\n")
	fmt.Fprintf(b, "| workload | floor CPU ms / 1k entities |")
	for _, sys := range others {
		fmt.Fprintf(b, " %s ÷ floor |", sys)
	}
	fmt.Fprintf(b, "\n|---|---:|%s\n", strings.Repeat("---:|", len(others)))
	for _, s := range rep.Summary {
		f := s.Systems[floor]
		if f.Runs == 0 {
			continue
		}
		if f.Invalid {
			fmt.Fprintf(b, "| %s | invalid: the floor had errors |%s\n", s.Workload, strings.Repeat(" — |", len(others)))
			continue
		}
		fmt.Fprintf(b, "| %s | %s |", s.Workload, fmtFloat(float64(f.CPUPer1000), 1))
		for _, sys := range s.Systems {
			switch {
			case sys.System == floorSystem:
			case sys.Invalid:
				fmt.Fprintf(b, " invalid |")
			default:
				fmt.Fprintf(b, " **%s** |", fmtRatio(num(ratio(float64(sys.CPUPer1000), float64(f.CPUPer1000)))))
			}
		}
		b.WriteString("\n")
	}
}

// write saves the report into out/<suite>/: report.md, <suite>.json and
// the charts; resultsPath, if set, gets a copy of report.md whose chart
// links point into the run folder.
func (rep *svcReport) write(out, resultsPath string) (string, error) {
	dir := filepath.Join(out, rep.Suite)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, rep.Suite+".json"), data, 0o644); err != nil {
		return "", err
	}
	for name, c := range rep.charts() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c.svg()), 0o644); err != nil {
			return "", err
		}
	}
	md := "# Benchmark report\n\n" + rep.markdown("")
	path := filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return "", err
	}
	if resultsPath != "" {
		rel, err := filepath.Rel(filepath.Dir(resultsPath), dir)
		if err != nil {
			rel = dir
		}
		if err := os.WriteFile(resultsPath, []byte("# Benchmark report\n\n"+rep.markdown(rel+"/")), 0o644); err != nil {
			return "", err
		}
	}
	return path, nil
}
