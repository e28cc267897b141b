package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// num is a float64 that marshals NaN (no figure: a read's write
// amplification, a ratio to a failed run) as JSON null, which
// encoding/json would otherwise refuse.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	var f float64
	err := json.Unmarshal(b, &f)
	*n = num(f)
	return err
}

// The baseline every ratio is taken against, and the engine it judges.
const (
	subject  = "tabula"
	baseline = "pebble"
)

// throughputBars are the minimum tabula/pebble ops/s ratios Tabula must
// reach, per workload.
func throughputBars() map[string]float64 {
	return map[string]float64{
		"fillrandom":  0.8,
		"readrandom":  0.8,
		"readmissing": 0.8,
		"scan":        0.7,
		"batch100":    0.8,
		"fillsync8":   0.8,
	}
}

// groupCommitBar is the minimum fillsync8/fillsync1 ops/s ratio of Tabula
// alone: eight synced writers must share fsyncs.
const groupCommitBar = 4.0

// engineReport is the engine suite's output: engine.json holds it whole,
// the Markdown table is rendered from it.
type engineReport struct {
	Suite       string            `json:"suite"`
	Command     string            `json:"command"`
	Started     time.Time         `json:"started"`
	Elapsed     float64           `json:"elapsed_seconds"`
	Machine     machine           `json:"machine"`
	Versions    map[string]string `json:"versions"`
	Config      EngineConfig      `json:"config"`
	Params      params            `json:"params"`
	Repeats     int               `json:"repeats"`
	Engines     []string          `json:"engines"`
	Workloads   []string          `json:"workloads"`
	Results     []result          `json:"results"`
	Failures    []string          `json:"failures,omitempty"`
	Summary     []workloadSummary `json:"summary"`
	GroupCommit *groupCommit      `json:"group_commit,omitempty"`
	Profiles    []profileRun      `json:"profiles,omitempty"`
	Large       *largeReport      `json:"large,omitempty"`
}

// engineSummary is one engine's medians on one workload.
type engineSummary struct {
	Engine    string `json:"engine"`
	Runs      int    `json:"runs"` // successful repeats
	OpsPerSec num    `json:"ops_per_sec"`
	WriteAmp  num    `json:"write_amp"`
	// WriteAmpNet leaves out writes cancelled by deletion before writeback.
	WriteAmpNet num `json:"write_amp_net"`
	SpaceAmp    num `json:"space_amp"`
	// SpaceAmpFiles is the space amplification by file sizes,
	// SpaceAmpTables by the sstables' du alone.
	SpaceAmpFiles  num `json:"space_amp_files"`
	SpaceAmpTables num `json:"space_amp_tables"`
	PeakRSS        num `json:"peak_rss"`
	// CPUMicrosPerOp is the median of the measured phases' CPU time per
	// operation (result.CPUSeconds), 0 where no repeat recorded it.
	CPUMicrosPerOp num `json:"cpu_us_per_op,omitempty"`
	// Latency medians over the repeats, in microseconds: an operation's
	// p50, p99 and p99.9 (0 in results recorded before it was), and the
	// longest operation (a stall shows there).
	P50Micros  num `json:"p50_us"`
	P99Micros  num `json:"p99_us"`
	P999Micros num `json:"p999_us,omitempty"`
	MaxMicros  num `json:"max_us"`
	// MaxWriteMicros is the median of the longest writes of a workload
	// that mixes reads and writes (ycsba), 0 for the others.
	MaxWriteMicros num `json:"max_write_us,omitempty"`
	// Stalls sums the engine's write stalls over the repeats and keeps
	// the longest of any; nil if the engine does not count them.
	Stalls *stalls `json:"stalls,omitempty"`
	// PerRepeat is ops/s by repeat, NaN (null) where the run failed.
	PerRepeat []num `json:"per_repeat_ops_per_sec"`
}

// workloadSummary sets the engines side by side on one workload. Every
// ratio is tabula/pebble: for ops/s higher is better, for the
// amplifications and RSS lower is better.
type workloadSummary struct {
	Workload           string          `json:"workload"`
	Engines            []engineSummary `json:"engines"`
	OpsRatio           num             `json:"ops_ratio"`
	PerRepeatOpsRatio  []num           `json:"per_repeat_ops_ratio"`
	WriteAmpRatio      num             `json:"write_amp_ratio"`
	SpaceAmpRatio      num             `json:"space_amp_ratio"`
	SpaceAmpTableRatio num             `json:"space_amp_table_ratio"`
	RSSRatio           num             `json:"rss_ratio"`
	Bar                num             `json:"bar"` // NaN: no bar on this workload
	Pass               *bool           `json:"pass,omitempty"`
}

func (w *workloadSummary) engine(name string) *engineSummary {
	for i := range w.Engines {
		if w.Engines[i].Engine == name {
			return &w.Engines[i]
		}
	}
	return nil
}

// tabulaToPebble formats tabula ÷ pebble of one figure of ws's two
// engines, "–" if either did not run.
func tabulaToPebble(ws workloadSummary, figure func(*engineSummary) num) string {
	t, pb := ws.engine("tabula"), ws.engine("pebble")
	if t == nil || pb == nil {
		return "–"
	}
	return fmtRatio(num(ratio(float64(figure(t)), float64(figure(pb)))))
}

// groupCommit is the fillsync8/fillsync1 scaling of each engine.
type groupCommit struct {
	Bar     float64       `json:"bar"`
	Scaling []engineRatio `json:"scaling"`
	Pass    *bool         `json:"pass,omitempty"` // Tabula's scaling >= Bar
}

type engineRatio struct {
	Engine string `json:"engine"`
	Ratio  num    `json:"ratio"`
}

// profileRun is an extra, unmeasured run with a CPU profile.
type profileRun struct {
	Engine   string `json:"engine"`
	Workload string `json:"workload"`
	Profile  string `json:"profile"` // pprof file, relative to the output folder
	Top      string `json:"top"`     // go tool pprof -top output, same
	// Hot is the head of the flat -top listing, for the report.
	Hot   []string `json:"hot,omitempty"`
	Error string   `json:"error,omitempty"`
}

// summarize computes the medians and ratios of rep.Results.
func summarize(rep *engineReport) {
	bars := throughputBars()
	rep.Summary = nil
	for _, wl := range rep.Workloads {
		ws := workloadSummary{Workload: wl, Bar: num(math.NaN())}
		for _, eng := range rep.Engines {
			ws.Engines = append(ws.Engines, summarizeEngine(rep.Results, eng, wl, rep.Repeats))
		}
		s, b := ws.engine(subject), ws.engine(baseline)
		ws.OpsRatio, ws.WriteAmpRatio, ws.SpaceAmpRatio, ws.SpaceAmpTableRatio, ws.RSSRatio = nan(), nan(), nan(), nan(), nan()
		if s != nil && b != nil {
			ws.OpsRatio = num(ratio(float64(s.OpsPerSec), float64(b.OpsPerSec)))
			ws.WriteAmpRatio = num(ratio(float64(s.WriteAmp), float64(b.WriteAmp)))
			ws.SpaceAmpRatio = num(ratio(float64(s.SpaceAmp), float64(b.SpaceAmp)))
			ws.SpaceAmpTableRatio = num(ratio(float64(s.SpaceAmpTables), float64(b.SpaceAmpTables)))
			ws.RSSRatio = num(ratio(float64(s.PeakRSS), float64(b.PeakRSS)))
			for _, r := range pairRatios(floats(s.PerRepeat), floats(b.PerRepeat)) {
				ws.PerRepeatOpsRatio = append(ws.PerRepeatOpsRatio, num(r))
			}
			if bar, ok := bars[wl]; ok {
				ws.Bar = num(bar)
				ws.Pass = passed(float64(ws.OpsRatio), bar)
			}
		}
		rep.Summary = append(rep.Summary, ws)
	}

	one, eight := summaryOf(rep.Summary, "fillsync1"), summaryOf(rep.Summary, "fillsync8")
	rep.GroupCommit = nil
	if one != nil && eight != nil {
		gc := &groupCommit{Bar: groupCommitBar}
		for _, eng := range rep.Engines {
			r := num(ratio(float64(eight.engine(eng).OpsPerSec), float64(one.engine(eng).OpsPerSec)))
			gc.Scaling = append(gc.Scaling, engineRatio{Engine: eng, Ratio: r})
			if eng == subject {
				gc.Pass = passed(float64(r), groupCommitBar)
			}
		}
		rep.GroupCommit = gc
	}
}

func summarizeEngine(results []result, eng, wl string, repeats int) engineSummary {
	es := engineSummary{Engine: eng}
	ops := make([]float64, repeats)
	for i := range ops {
		ops[i] = math.NaN()
	}
	var wa, wan, sa, saf, sat, rss, cpu, p50, p99, p999, longest, longestWrite []float64
	for _, r := range results {
		if r.Engine != eng || r.Workload != wl || r.Error != "" || r.Repeat < 1 || r.Repeat > repeats {
			continue
		}
		es.Runs++
		ops[r.Repeat-1] = r.OpsPerSec
		wa = append(wa, float64(r.WriteAmp))
		wan = append(wan, float64(r.WriteAmpNet))
		sa = append(sa, float64(r.SpaceAmp))
		saf = append(saf, float64(r.SpaceAmpFiles))
		sat = append(sat, float64(r.SpaceAmpTables))
		rss = append(rss, float64(r.PeakRSS))
		if r.CPUSeconds > 0 && r.Ops > 0 {
			cpu = append(cpu, r.CPUSeconds*1e6/float64(r.Ops))
		}
		p50, p99, longest = append(p50, float64(r.P50Micros)), append(p99, float64(r.P99Micros)), append(longest, float64(r.MaxMicros))
		p999 = append(p999, float64(r.P999Micros))
		longestWrite = append(longestWrite, float64(r.MaxWriteMicros))
		if r.Stalls != nil {
			if es.Stalls == nil {
				es.Stalls = &stalls{}
			}
			es.Stalls.Count += r.Stalls.Count
			es.Stalls.LongestMicros = max(es.Stalls.LongestMicros, r.Stalls.LongestMicros)
		}
	}
	es.OpsPerSec = num(median(ops))
	es.WriteAmp = num(median(wa))
	es.WriteAmpNet = num(median(wan))
	es.SpaceAmp = num(median(sa))
	es.SpaceAmpFiles = num(median(saf))
	es.SpaceAmpTables = num(median(sat))
	es.PeakRSS = num(median(rss))
	if len(cpu) > 0 {
		es.CPUMicrosPerOp = num(median(cpu))
	}
	es.P50Micros, es.P99Micros, es.MaxMicros = num(median(p50)), num(median(p99)), num(median(longest))
	es.P999Micros = num(median(p999))
	es.MaxWriteMicros = num(median(longestWrite))
	for _, o := range ops {
		es.PerRepeat = append(es.PerRepeat, num(o))
	}
	return es
}

func summaryOf(s []workloadSummary, wl string) *workloadSummary {
	i := slices.IndexFunc(s, func(w workloadSummary) bool { return w.Workload == wl })
	if i < 0 {
		return nil
	}
	return &s[i]
}

// passed reports whether r reaches bar; nil (no verdict) if r is NaN.
func passed(r, bar float64) *bool {
	if math.IsNaN(r) {
		return nil
	}
	ok := r >= bar
	return &ok
}

func nan() num { return num(math.NaN()) }

func floats(ns []num) []float64 {
	out := make([]float64, len(ns))
	for i, n := range ns {
		out[i] = float64(n)
	}
	return out
}

// belowBar lists the workloads on which Tabula misses its bar (fillsync8
// also when group commit does not scale), for profiling.
func belowBar(rep *engineReport) []string {
	var out []string
	for _, ws := range rep.Summary {
		if ws.Pass != nil && !*ws.Pass {
			out = append(out, ws.Workload)
		}
	}
	if gc := rep.GroupCommit; gc != nil && gc.Pass != nil && !*gc.Pass && !slices.Contains(out, "fillsync8") {
		out = append(out, "fillsync8")
	}
	return out
}

// markdown renders the suite's tables.
func (rep *engineReport) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	eng := rep.Engines
	header := func(first string, cols []string, last ...string) {
		p("| %s | %s |", first, strings.Join(cols, " | "))
		for _, l := range last {
			p(" %s |", l)
		}
		p("\n|---|%s", strings.Repeat("---:|", len(cols)))
		for range last {
			p("---|")
		}
		p("\n")
	}
	hasRatio := slices.Contains(eng, subject) && slices.Contains(eng, baseline)

	p("### Throughput: median ops/s over %d repeats (higher is better)\n\n", rep.Repeats)
	var last []string
	if hasRatio {
		last = []string{"tabula/pebble", "bar", "per-repeat tabula/pebble"}
	}
	header("workload", eng, last...)
	for _, ws := range rep.Summary {
		p("| %s |", ws.Workload)
		for _, e := range ws.Engines {
			p(" %s |", fmtOps(float64(e.OpsPerSec)))
		}
		if hasRatio {
			p(" **%s** | %s | %s |", fmtRatio(ws.OpsRatio), fmtBar(ws.Bar, ws.Pass), fmtRatios(ws.PerRepeatOpsRatio))
		}
		p("\n")
	}
	if gc := rep.GroupCommit; gc != nil {
		var parts []string
		for _, s := range gc.Scaling {
			part := fmt.Sprintf("%s **%s×**", s.Engine, fmtRatio(s.Ratio))
			if s.Engine == subject {
				part += " " + verdict(gc.Pass)
			}
			parts = append(parts, part)
		}
		p("\nGroup commit, fillsync8 ÷ fillsync1 ops/s of each engine (Tabula's bar: ≥ %.0f×): %s\n", gc.Bar, strings.Join(parts, ", "))
	}
	if hasRatio {
		below := belowBar(rep)
		if len(below) == 0 {
			below = []string{"none"}
		}
		p("\nWorkloads where Tabula is below its bar: %s.\n", strings.Join(below, ", "))
	}

	// A table of one figure: cell renders an engine's, ratio tabula/pebble.
	type table struct {
		title, unit string
		cell        func(engineSummary) string
		ratio       func(workloadSummary) string
		skip        func(workloadSummary) bool
	}
	isRead := func(ws workloadSummary) bool {
		w, err := findWorkload(ws.Workload)
		return err == nil && w.Prefill && ws.Workload != "overwrite"
	}
	never := func(workloadSummary) bool { return false }
	two := func(x num) string { return fmtFloat(float64(x), 2) }
	for _, t := range []table{
		{
			title: "Write amplification: write_bytes ÷ logical key+value bytes written (in brackets: net of cancelled writes)",
			cell:  func(e engineSummary) string { return two(e.WriteAmp) + " (" + two(e.WriteAmpNet) + ")" },
			ratio: func(ws workloadSummary) string { return fmtRatio(ws.WriteAmpRatio) },
			skip:  isRead,
		},
		{
			title: "Space amplification: du of the data directory ÷ live key+value bytes (in brackets: sstables alone)",
			cell:  func(e engineSummary) string { return two(e.SpaceAmp) + " (" + two(e.SpaceAmpTables) + ")" },
			ratio: func(ws workloadSummary) string {
				return fmtRatio(ws.SpaceAmpRatio) + " (" + fmtRatio(ws.SpaceAmpTableRatio) + ")"
			},
			skip: never,
		},
		{
			title: "Latency of one operation, a batch for batch100: p50 / p99 / p99.9 / longest (in brackets: the longest write, where reads and writes mix), medians over the repeats",
			unit:  " µs",
			cell: func(e engineSummary) string {
				p999 := "–" // a result recorded before p99.9 was
				if e.P999Micros > 0 {
					p999 = fmtFloat(float64(e.P999Micros), 1)
				}
				s := fmtFloat(float64(e.P50Micros), 1) + " / " + fmtFloat(float64(e.P99Micros), 1) + " / " + p999 + " / " + fmtFloat(float64(e.MaxMicros), 0)
				if e.MaxWriteMicros > 0 {
					s += " (" + fmtFloat(float64(e.MaxWriteMicros), 0) + ")"
				}
				return s
			},
			ratio: func(ws workloadSummary) string {
				return tabulaToPebble(ws, func(e *engineSummary) num { return e.P99Micros }) + " (p99)"
			},
			skip: never,
		},
		{
			title: "Write stalls, the engine holding writers back for flushes or compactions, over each run's whole process (a prefill included): how many in all the repeats / the longest in any",
			unit:  "",
			cell: func(e engineSummary) string {
				switch {
				case e.Stalls == nil:
					return "–"
				case e.Stalls.Count == 0:
					return "0"
				}
				return fmt.Sprintf("%d / %s ms", e.Stalls.Count, fmtFloat(float64(e.Stalls.LongestMicros)/1000, 1))
			},
			ratio: func(workloadSummary) string { return "–" },
			skip:  never,
		},
		{
			title: "CPU time per operation (per entry for batch100) over the measured phase: the whole process, the engine's background work included (what it leaves as compaction debt at the end is not)",
			unit:  " µs",
			cell:  func(e engineSummary) string { return fmtFloat(float64(e.CPUMicrosPerOp), 2) },
			ratio: func(ws workloadSummary) string {
				return tabulaToPebble(ws, func(e *engineSummary) num { return e.CPUMicrosPerOp })
			},
			skip: func(ws workloadSummary) bool {
				return !slices.ContainsFunc(ws.Engines, func(e engineSummary) bool { return e.CPUMicrosPerOp > 0 })
			},
		},
		{
			title: "Peak RSS during the measured phase",
			unit:  " MiB",
			cell:  func(e engineSummary) string { return fmtFloat(float64(e.PeakRSS)/(1<<20), 0) },
			ratio: func(ws workloadSummary) string { return fmtRatio(ws.RSSRatio) },
			skip:  never,
		},
	} {
		p("\n### %s (lower is better)\n\n", t.title)
		var last []string
		if hasRatio {
			last = []string{"tabula/pebble"}
		}
		cols := make([]string, len(eng))
		for i, e := range eng {
			cols[i] = e + t.unit
		}
		header("workload", cols, last...)
		for _, ws := range rep.Summary {
			if t.skip(ws) {
				continue
			}
			p("| %s |", ws.Workload)
			for _, e := range ws.Engines {
				p(" %s |", t.cell(e))
			}
			if hasRatio {
				p(" **%s** |", t.ratio(ws))
			}
			p("\n")
		}
	}

	if len(rep.Failures) > 0 {
		p("\n### Failed runs\n\n")
		for _, f := range rep.Failures {
			p("- %s\n", strings.ReplaceAll(f, "\n", "\n  "))
		}
	}
	if len(rep.Profiles) > 0 {
		p("\n### CPU profiles (extra, unmeasured runs; files in the output folder)\n")
		for _, pr := range rep.Profiles {
			if pr.Error != "" {
				p("\n%s %s: profiling failed: %s\n", pr.Engine, pr.Workload, pr.Error)
				continue
			}
			p("\n%s %s (`%s`, `%s`), hottest functions by flat CPU time:\n\n```\n%s\n```\n",
				pr.Engine, pr.Workload, pr.Profile, pr.Top, strings.Join(pr.Hot, "\n"))
		}
	}
	return b.String()
}

// header renders the command line, the machine and the configuration.
func (rep *engineReport) header() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("- Command: `%s`\n", rep.Command)
	p("- Date: %s, %s in total\n", rep.Started.UTC().Format("2006-01-02 15:04 UTC"), time.Duration(rep.Elapsed*float64(time.Second)).Round(time.Second))
	p("- Machine: %s\n", rep.Machine.describe())
	var vs []string
	for _, k := range []string{"tabula", "pebble", "goleveldb"} {
		if v, ok := rep.Versions[k]; ok {
			vs = append(vs, k+" "+v)
		}
	}
	p("- Engines: %s\n", strings.Join(vs, ", "))
	pr := rep.Params
	readOps := pr.ReadOps
	if readOps <= 0 {
		readOps = pr.N
	}
	p("- N = %d keys of %d bytes, values of %d bytes; reads and scans: at most %d ops or %s; fillsync: %s",
		pr.N, keyLen, valueLen, readOps, pr.ReadDur, pr.SyncDur)
	if pr.SyncOps > 0 {
		p(" or %d ops", pr.SyncOps)
	}
	if pr.FillRate > 0 {
		p("; fills capped at %s sets/s", fmtOps(pr.FillRate))
	}
	p("; seed %d; %d repeats, engines interleaved\n", pr.Seed, rep.Repeats)
	return b.String()
}

func fmtOps(x float64) string {
	switch {
	case math.IsNaN(x):
		return "—"
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1fk", x/1e3)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

func fmtFloat(x float64, prec int) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func fmtRatio(r num) string { return fmtFloat(float64(r), 2) }

func fmtRatios(rs []num) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmtRatio(r)
	}
	return strings.Join(s, " ")
}

func fmtBar(bar num, pass *bool) string {
	if math.IsNaN(float64(bar)) {
		return ""
	}
	return fmt.Sprintf("≥ %.1f %s", float64(bar), verdict(pass))
}

func verdict(pass *bool) string {
	switch {
	case pass == nil:
		return "?"
	case *pass:
		return "✅"
	default:
		return "❌ below"
	}
}
