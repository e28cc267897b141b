package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// engineFlags are the engine suite's command-line settings.
type engineFlags struct {
	common
	engines   string
	workloads string
	params    params
	profile   string
	results   string
	from      string

	large       bool
	memLimitMiB int64
	drainLimit  time.Duration
	sampleEvery time.Duration
}

func (f *engineFlags) register(fs *flag.FlagSet) {
	f.common.register(fs)
	fs.StringVar(&f.engines, "engines", strings.Join(engineNames(), ","), "engines to run, in the order each repeat runs them (also available: pebble-l6filters, see RESULTS.md)")
	fs.StringVar(&f.workloads, "workloads", strings.Join(workloadNames(), ","), "workloads to run")
	fs.IntVar(&f.params.N, "n", 1_000_000, "key count: keys filled, and the key space reads pick from")
	fs.Uint64Var(&f.params.Seed, "seed", 1, "seed of every key order and random pick (the same for all engines)")
	fs.IntVar(&f.params.ReadOps, "read-ops", 0, "read/scan operations per run (0: n)")
	fs.DurationVar(&f.params.ReadDur, "read-dur", 5*time.Second, "time limit of a read/scan run (0: none)")
	fs.IntVar(&f.params.SyncOps, "sync-ops", 0, "synced writes per fillsync run (0: until -sync-dur)")
	fs.DurationVar(&f.params.SyncDur, "sync-dur", 5*time.Second, "duration of a fillsync run")
	fs.Float64Var(&f.params.FillRate, "fill-rate", 0, "sets per second fillseq and fillrandom make at most (0: no cap), to compare latencies at one rate of work")
	fs.StringVar(&f.profile, "profile", "auto", "CPU profiles of extra tabula and pebble runs: auto (workloads where tabula is below its bar), all, none")
	fs.StringVar(&f.results, "results", "", "also write the full report (machine, method, tables) to this file, e.g. ../RESULTS.md")
	fs.StringVar(&f.from, "from", "", "run nothing: render the reports again from a past run's engine.json (into its folder, or -out)")
	fs.BoolVar(&f.large, "large", false, "the large run: one fill, then the other workloads on what it left, in one child per engine and repeat; "+
		"unless given, -n 20000000, -workloads "+largeWorkloads+", -engines tabula,pebble, -read-dur 30s, -timeout 3h")
	fs.Int64Var(&f.memLimitMiB, "mem-limit", 1024, "-large: memory (page cache included) of a child after its fill, in MiB, through a cgroup v1 memory controller; 0: no limit")
	fs.DurationVar(&f.drainLimit, "drain-limit", 10*time.Minute, "-large: longest wait after the fill for the compaction debt to be paid")
	fs.DurationVar(&f.sampleEvery, "sample", time.Second, "-large: period of the samples of each engine's shape")
}

// largeWorkloads is the large run's default chain.
const largeWorkloads = "fillrandom,readrandom,scan,ycsba"

// largeDefaults gives the large run its own defaults for the flags not
// set on the command line.
func (f *engineFlags) largeDefaults(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["n"] {
		f.params.N = 20_000_000
	}
	if !set["workloads"] {
		f.workloads = largeWorkloads
	}
	if !set["engines"] {
		f.engines = subject + "," + baseline
	}
	if !set["read-dur"] {
		f.params.ReadDur = 30 * time.Second
	}
	if !set["timeout"] {
		f.timeout = 3 * time.Hour
	}
	if !set["profile"] {
		f.profile = "none"
	}
}

func (f *engineFlags) check() error {
	if err := checkEngines(splitList(f.engines)); err != nil {
		return err
	}
	for _, w := range splitList(f.workloads) {
		if _, err := findWorkload(w); err != nil {
			return err
		}
	}
	if len(splitList(f.workloads)) == 0 {
		return errors.New("no workloads selected")
	}
	if f.large {
		if err := checkChain(splitList(f.workloads)); err != nil {
			return err
		}
		if f.profile != "none" {
			return errors.New("-large takes no profiles (-profile none)")
		}
		if f.memLimitMiB < 0 || f.drainLimit < 0 || f.sampleEvery <= 0 {
			return errors.New("-mem-limit and -drain-limit must not be negative, -sample must be positive")
		}
	}
	if err := checkKeySpace(f.params.N); err != nil {
		return err
	}
	if f.params.SyncDur <= 0 {
		return errors.New("-sync-dur must be positive")
	}
	if !(f.params.FillRate >= 0) || math.IsInf(f.params.FillRate, 1) {
		return fmt.Errorf("-fill-rate %v: want a number of sets per second, 0 for no cap", f.params.FillRate)
	}
	if !slices.Contains([]string{"auto", "all", "none"}, f.profile) {
		return fmt.Errorf("-profile %q: want auto, all or none", f.profile)
	}
	return f.common.check()
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// runEngineSuite is the engine subcommand: every (repeat, workload, engine)
// in its own child, engines interleaved so that they share the machine's
// noise, then medians, ratios, reports and profiles.
func runEngineSuite(args []string, log io.Writer) error {
	var f engineFlags
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	fs.SetOutput(log)
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(log, "usage: go -C bench/peers run . engine [flags]\n\nWorkloads:\n")
		for _, w := range allWorkloads() {
			fmt.Fprintf(log, "  %-12s %s\n", w.Name, w.Summary)
		}
		fmt.Fprintf(log, "\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("engine: unexpected arguments %q", fs.Args())
	}
	if f.large {
		f.largeDefaults(fs)
	}
	if err := f.check(); err != nil {
		return err
	}
	if f.from != "" {
		return rerender(f.from, f.out, f.results)
	}
	env, err := f.common.setup(log)
	if err != nil {
		return err
	}

	rep := &engineReport{
		Suite:     "engine",
		Command:   commandLine("engine", args),
		Started:   time.Now(),
		Machine:   describeMachine(env.run.tmpRoot),
		Versions:  versions(env.repo),
		Config:    defaultEngineConfig(),
		Params:    f.params,
		Repeats:   f.repeats,
		Engines:   splitList(f.engines),
		Workloads: splitList(f.workloads),
	}
	if f.large {
		rep.Large = &largeReport{MemLimit: f.memLimitMiB << 20, DrainLimit: f.drainLimit, SampleEvery: f.sampleEvery}
		runLarge(rep, env, log)
	}
	prog := newProgress(rep.Repeats * len(rep.Workloads) * len(rep.Engines))
	for rpt := 1; rpt <= rep.Repeats && !f.large; rpt++ {
		for _, wl := range rep.Workloads {
			for _, eng := range rep.Engines {
				prog.start(fmt.Sprintf("repeat %d %s %s", rpt, wl, eng))
				res, err := env.run.run(childSpec{Engine: eng, Workload: wl, Repeat: rpt, Params: rep.Params, Config: rep.Config})
				prog.finish()
				if err != nil {
					fmt.Fprintf(log, "FAILED: %v\n", err)
					rep.Failures = append(rep.Failures, err.Error())
					if res.Error == "" {
						res.Error = err.Error()
					}
				}
				res.Engine, res.Workload, res.Repeat = eng, wl, rpt
				rep.Results = append(rep.Results, res)
			}
		}
	}
	summarize(rep)
	rep.Profiles = profileRuns(rep, &f, env)
	rep.Elapsed = time.Since(rep.Started).Seconds()

	if err := rep.write(env.out, f.results); err != nil {
		return err
	}
	fmt.Fprintf(log, "results in %s\n", env.out)
	if len(rep.Failures) > 0 {
		return fmt.Errorf("%d runs failed", len(rep.Failures))
	}
	return nil
}

// rerender loads a past run's engine.json and writes its reports again, with
// the current summary and text: a change to the report needs no new run.
func rerender(from, out, resultsPath string) error {
	js, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var rep engineReport
	if err := json.Unmarshal(js, &rep); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	summarize(&rep)
	if out == "" {
		out = filepath.Dir(from)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return rep.write(out, resultsPath)
}

// write saves engine.json and engine.md in out, prints the tables on
// stdout, and writes the full report to resultsPath if set.
func (rep *engineReport) write(out, resultsPath string) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "engine.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "engine-throughput.svg"), []byte(rep.throughputChart().svg()), 0o644); err != nil {
		return err
	}
	if lg := rep.Large; lg != nil {
		if err := os.WriteFile(filepath.Join(out, "large-series.csv"), []byte(lg.seriesCSV()), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "large-debt.svg"), []byte(lg.debtChart().svg()), 0o644); err != nil {
			return err
		}
	}
	md := rep.engineMD()
	if err := os.WriteFile(filepath.Join(out, "engine.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(md)
	if resultsPath != "" {
		runDir, err := relDir(filepath.Dir(resultsPath), out)
		if err != nil {
			return err
		}
		return os.WriteFile(resultsPath, []byte(rep.resultsDoc(filepath.ToSlash(runDir)+"/")), 0o644)
	}
	return nil
}

// relDir is dir relative to base, either of them relative to the working
// directory or absolute.
func relDir(base, dir string) (string, error) {
	absBase, err := filepath.Abs(base)
	if err != nil {
		return "", err
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.Rel(absBase, absDir)
}

// engineMD is engine.md, the engine suite's section of the all report:
// the run, its tables, the engines' configuration and its caveats, the
// chart.
func (rep *engineReport) engineMD() string {
	return rep.header() + "\n" + rep.markdown() + rep.largeMD("") + "\n" + rep.configDoc("###") + "![engine throughput](engine-throughput.svg)\n"
}

// throughputChart is the engines' median ops/s per workload.
func (rep *engineReport) throughputChart() barChart {
	c := barChart{Title: "engine: operations per second (median)", Unit: "ops/s (log)", Log: true, Series: rep.Engines}
	for _, w := range rep.Summary {
		c.Category = append(c.Category, w.Workload)
		var row []float64
		for _, eng := range rep.Engines {
			v := math.NaN()
			if es := w.engine(eng); es != nil {
				v = float64(es.OpsPerSec)
			}
			row = append(row, v)
		}
		c.Values = append(c.Values, row)
	}
	return c
}

// profileRuns makes the CPU profiles -profile asks for: one extra run of
// tabula and one of pebble per workload, with the child's -cpuprofile, so
// the two can be compared function by function. These runs are not in the
// figures (profiling costs a few percent).
func profileRuns(rep *engineReport, f *engineFlags, env *suiteEnv) []profileRun {
	var wls []string
	switch f.profile {
	case "all":
		wls = rep.Workloads
	case "auto":
		wls = belowBar(rep)
	}
	if len(wls) == 0 {
		return nil
	}
	dir := filepath.Join(env.out, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return []profileRun{{Error: err.Error()}}
	}
	var engines []string
	for _, e := range []string{subject, baseline} {
		if slices.Contains(rep.Engines, e) {
			engines = append(engines, e)
		}
	}
	var out []profileRun
	prog := newProgress(len(wls) * len(engines))
	for _, wl := range wls {
		for _, eng := range engines {
			pr := profileRun{Engine: eng, Workload: wl}
			base := filepath.Join(dir, eng+"-"+wl)
			prog.start("profiling " + wl + " " + eng)
			_, err := env.run.run(childSpec{Engine: eng, Workload: wl, Params: rep.Params, Config: rep.Config, CPUProfile: base + ".pprof"})
			prog.finish()
			if err == nil {
				pr.Hot, err = pprofTop(env.run.exe, base+".pprof", base+".top.txt")
			}
			if err != nil {
				pr.Error = err.Error()
			} else {
				pr.Profile = filepath.Join("profiles", eng+"-"+wl+".pprof")
				pr.Top = filepath.Join("profiles", eng+"-"+wl+".top.txt")
			}
			out = append(out, pr)
		}
	}
	return out
}

// pprofTop writes `go tool pprof -top` of a profile, by flat and by
// cumulative time, and returns the head of the flat listing.
func pprofTop(exe, prof, out string) ([]string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w (the .pprof file is there)", err)
	}
	var text []byte
	var hot []string
	for i, extra := range [][]string{{"-nodecount=40"}, {"-cum", "-nodecount=40"}} {
		args := append([]string{"tool", "pprof", "-top"}, extra...)
		b, err := exec.Command(goTool, append(args, exe, prof)...).Output()
		if err != nil {
			return nil, fmt.Errorf("go tool pprof: %w", err)
		}
		if i == 0 {
			hot = topLines(string(b), 15)
		}
		text = append(append(text, b...), '\n')
	}
	return hot, os.WriteFile(out, text, 0o644)
}

// topLines returns the "Duration" line and the first n rows of a pprof
// -top listing.
func topLines(top string, n int) []string {
	var out []string
	rows := -1
	for line := range strings.SplitSeq(top, "\n") {
		switch {
		case strings.HasPrefix(line, "Duration:"):
			out = append(out, line)
		case strings.Contains(line, "flat%") && rows < 0:
			out = append(out, line)
			rows = 0
		case rows >= 0 && rows < n && strings.TrimSpace(line) != "":
			out = append(out, line)
			rows++
		}
	}
	return out
}

// versions names the engines' versions: the peers' from the build's
// module list, Tabula's from the repository's git state.
func versions(repo string) map[string]string {
	v := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/cockroachdb/pebble/v2":
				v["pebble"] = "v2 " + d.Version
			case "github.com/syndtr/goleveldb":
				v["goleveldb"] = d.Version
			}
		}
	}
	tab := "working tree"
	if out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output(); err == nil {
		tab = "git " + strings.TrimSpace(string(out))
		st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--", ".", ":!bench").Output()
		if err == nil && len(st) > 0 {
			tab += " + uncommitted changes"
		}
	}
	v["tabula"] = tab
	return v
}

// commandLine renders how the suite was invoked, as one would type it.
func commandLine(suite string, args []string) string {
	parts := []string{"go -C bench/peers run .", suite}
	for _, a := range args {
		if strings.ContainsAny(a, " \t'\"") {
			a = "'" + a + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
