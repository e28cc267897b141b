package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// largeReport is the large run's own part of the engine report: how it
// ran and every child's samples. Its workloads' figures are in the
// report's Results like any run's.
type largeReport struct {
	MemLimit    int64         `json:"mem_limit"` // bytes; 0: none
	DrainLimit  time.Duration `json:"drain_limit"`
	SampleEvery time.Duration `json:"sample_every"`
	Runs        []largeRun    `json:"runs"`
}

// largeRun is one child of the large run.
type largeRun struct {
	Engine      string   `json:"engine"`
	Repeat      int      `json:"repeat"`
	Samples     []sample `json:"samples"`
	UserSeconds float64  `json:"user_seconds"`
	SysSeconds  float64  `json:"sys_seconds"`
}

// runLarge runs the large run's children, engines interleaved within each
// repeat, and files each child's phases as the results of its workloads.
func runLarge(rep *engineReport, env *suiteEnv, log io.Writer) {
	lg := rep.Large
	prog := newProgress(rep.Repeats * len(rep.Engines))
	for rpt := 1; rpt <= rep.Repeats; rpt++ {
		for _, eng := range rep.Engines {
			prog.start(fmt.Sprintf("repeat %d %s %s", rpt, strings.Join(rep.Workloads, "+"), eng))
			res, err := runLargeChild(rep, env, eng, rpt)
			prog.finish()
			if err != nil {
				fmt.Fprintf(log, "FAILED: %v\n", err)
				rep.Failures = append(rep.Failures, err.Error())
			}
			lg.Runs = append(lg.Runs, largeRun{Engine: eng, Repeat: rpt, Samples: res.Samples, UserSeconds: res.UserSeconds, SysSeconds: res.SysSeconds})
			for _, wl := range rep.Workloads {
				i := slices.IndexFunc(res.Phases, func(r result) bool { return r.Workload == wl })
				var ph result
				if i >= 0 {
					ph = res.Phases[i]
				} else {
					ph.Error = "not run: an earlier workload of the chain failed"
				}
				ph.Engine, ph.Workload, ph.Repeat = eng, wl, rpt
				rep.Results = append(rep.Results, ph)
			}
		}
	}
}

// runLargeChild runs one chain in a child, in a memory cgroup of its own
// if the run limits memory.
func runLargeChild(rep *engineReport, env *suiteEnv, eng string, rpt int) (result, error) {
	lg := rep.Large
	spec := childSpec{
		Engine: eng, Workload: "large", Chain: rep.Workloads, Repeat: rpt, Params: rep.Params, Config: rep.Config,
		Large: largeSpec{MemLimit: lg.MemLimit, DrainLimit: lg.DrainLimit, SampleEvery: lg.SampleEvery},
	}
	if lg.MemLimit > 0 {
		cg, remove, err := newMemoryCgroup(fmt.Sprintf("tabula-bench-%d-%s-%d", os.Getpid(), eng, rpt))
		if err != nil {
			return result{}, err
		}
		defer remove()
		spec.Large.Cgroup = cg
	}
	return env.run.run(spec)
}

// largeMD is the large run's section of the report: the shape of each
// engine's tree over the run, and what its reads cost the disk. Its chart
// is linked as runDir + "large-debt.svg": runDir is the run's folder
// relative to the report ("" beside it).
func (rep *engineReport) largeMD(runDir string) string {
	lg := rep.Large
	if lg == nil {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	gib := func(n float64) string { return fmtFloat(n/(1<<30), 2) + " GiB" }
	p("\n### The large run\n\n")
	p("Each engine, in a child of its own per repeat, ran %s on one empty DB (%s of keys and values), then waited, "+
		"up to %s and unmeasured, until it estimated no compaction debt and ran no compaction, or had run none for a second "+
		"(Pebble counts the L0 files it leaves below its compaction threshold as debt); the other workloads "+
		"(%s) then ran one after the other on what the fill left, with no settle or manual compaction. ",
		rep.Workloads[0], gib(float64(int64(rep.Params.N)*entryLen)), lg.DrainLimit, strings.Join(rep.Workloads[1:], ", "))
	if lg.MemLimit > 0 {
		p("From the end of the drain the child ran in a memory cgroup limited to %d MiB, page cache included, "+
			"so most of the data cannot be cached by the OS either and reads go to the disk. ", lg.MemLimit>>20)
	} else {
		p("Memory was not limited: the page cache may hold the data, so reads need not go to the disk. ")
	}
	p("The engine's shape was sampled every %s (`large-series.csv` in the run's folder); the debt is each engine's "+
		"own estimate (Tabula's `Compaction.Debt`, Pebble's `EstimatedDebt`), computed differently, so the curves "+
		"show each engine's backlog over time rather than one measure. ", lg.SampleEvery)
	p("Caches differ here more than in the standard runs: after the fill Pebble's memtables are nearly empty, so " +
		"the two memtables' worth its cache was given beyond the block cache (see the configuration) holds blocks " +
		"too, up to three times Tabula's; Tabula keeps every open table's index and bloom filter outside its block " +
		"cache instead (Pebble keeps them in its cache).\n\n")

	p("| engine | repeat | fill | debt peak | debt mean in fill | L0 files peak | drain | debt left | written by fill + drain ÷ logical | disk at end | child CPU |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, run := range lg.Runs {
		fill := rep.result(run.Engine, rep.Workloads[0], run.Repeat)
		var peak, sum, n, l0 float64
		for _, s := range run.Samples {
			if s.Phase == rep.Workloads[0] {
				sum += float64(s.Debt)
				n++
			}
			peak, l0 = math.Max(peak, float64(s.Debt)), math.Max(l0, float64(s.L0Files))
		}
		mean := math.NaN()
		if n > 0 {
			mean = sum / n
		}
		last := sample{}
		if len(run.Samples) > 0 {
			last = run.Samples[len(run.Samples)-1]
		}
		debt := func(v float64) string {
			if v < 0 || math.IsNaN(v) {
				return "–"
			}
			return fmtFloat(v/(1<<20), 0) + " MiB"
		}
		p("| %s | %d | %s s | %s | %s | %.0f | %s s | %s | %s | %s | %s s |\n", run.Engine, run.Repeat,
			fmtFloat(fill.Seconds, 1), debt(peak), debt(mean), l0, fmtFloat(fill.DrainSeconds, 1), debt(float64(fill.DebtAfterDrain)),
			fmtFloat(float64(fill.IO.WriteBytes+fill.DrainWriteBytes)/float64(max(fill.LogicalBytes, 1)), 2), gib(float64(last.DiskBytes)),
			fmtFloat(run.UserSeconds+run.SysSeconds, 0))
	}

	p("\nDisk reads of the read workloads: bytes the child read from the disk per operation, and per byte of " +
		"key and value the workload returned (medians over the repeats).\n\n")
	p("| workload | %s |\n|---|%s\n", strings.Join(rep.Engines, " | "), strings.Repeat("---:|", len(rep.Engines)))
	for _, wl := range rep.Workloads[1:] {
		p("| %s |", wl)
		for _, eng := range rep.Engines {
			var perOp, perByte []float64
			for _, r := range rep.Results {
				if r.Engine != eng || r.Workload != wl || r.Error != "" || r.Ops == 0 {
					continue
				}
				returned := float64(r.Ops) * float64(entryLen)
				if r.Entries > 0 {
					returned = float64(r.Entries) * float64(entryLen)
				}
				perOp = append(perOp, float64(r.IO.ReadBytes)/float64(r.Ops))
				perByte = append(perByte, float64(r.IO.ReadBytes)/returned)
			}
			p(" %s B/op, %s |", fmtFloat(median(perOp), 0), fmtFloat(median(perByte), 2))
		}
		p("\n")
	}
	p("\n![compaction debt over time](%slarge-debt.svg)\n", runDir)
	return b.String()
}

// result returns the run's result of one engine, workload and repeat (a
// zero result if there is none).
func (rep *engineReport) result(eng, wl string, rpt int) result {
	for _, r := range rep.Results {
		if r.Engine == eng && r.Workload == wl && r.Repeat == rpt {
			return r
		}
	}
	return result{}
}

// debtChart is each engine's compaction debt over its first repeat.
func (lg *largeReport) debtChart() lineChart {
	c := lineChart{Title: "large run: compaction debt over time (repeat 1)", XUnit: "seconds since the fill began", YUnit: "debt (MiB)"}
	for _, run := range lg.Runs {
		if run.Repeat != 1 {
			continue
		}
		var pts [][2]float64
		for _, s := range run.Samples {
			if s.Debt >= 0 {
				pts = append(pts, [2]float64{s.Seconds, float64(s.Debt) / (1 << 20)})
			}
		}
		c.Series = append(c.Series, run.Engine)
		c.Points = append(c.Points, pts)
	}
	return c
}

// seriesCSV is every sample of the large run, one row each.
func (lg *largeReport) seriesCSV() string {
	var b strings.Builder
	b.WriteString("engine,repeat,seconds,phase,debt_bytes,l0_files,compacting,disk_bytes,read_bytes,write_bytes,rss_bytes\n")
	for _, run := range lg.Runs {
		for _, s := range run.Samples {
			fmt.Fprintf(&b, "%s,%d,%.1f,%s,%d,%d,%d,%d,%d,%d,%d\n", run.Engine, run.Repeat, s.Seconds, s.Phase,
				s.Debt, s.L0Files, s.Compacting, s.DiskBytes, s.ReadBytes, s.WriteBytes, s.RSS)
		}
	}
	return b.String()
}
