package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/tabuladb/tabula/internal/rusage"
)

// childSpec is everything a child needs to run one (engine, workload,
// repeat). The parent passes it as JSON in the hidden child subcommand's
// -spec flag.
type childSpec struct {
	Engine     string       `json:"engine"`
	Workload   string       `json:"workload"`
	Repeat     int          `json:"repeat"`
	Dir        string       `json:"dir"`
	Params     params       `json:"params"`
	Config     EngineConfig `json:"config"`
	CPUProfile string       `json:"cpuprofile,omitempty"`
	// Chain, in the large run, replaces Workload: these workloads run one
	// after the other on one DB (see runChain).
	Chain []string  `json:"chain,omitempty"`
	Large largeSpec `json:"large"`
}

// result is what a child reports, as one JSON object on stdout. Every byte
// and second figure is for the measured phase only.
type result struct {
	Engine   string `json:"engine"`
	Workload string `json:"workload"`
	Repeat   int    `json:"repeat"`
	N        int    `json:"n"`

	Ops       int64   `json:"ops"`
	Entries   int64   `json:"entries,omitempty"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// SetupSeconds is the untimed prefill and settle of read workloads;
	// SyncSeconds the untimed sync(2) after the measured phase.
	SetupSeconds float64 `json:"setup_seconds,omitempty"`
	SyncSeconds  float64 `json:"sync_seconds"`

	IO           ioCounters `json:"io"`
	LogicalBytes int64      `json:"logical_bytes"`
	WriteAmp     num        `json:"write_amp"` // io.write_bytes / logical_bytes
	// WriteAmpNet leaves out cancelled_write_bytes: pages of files deleted
	// before writeback, which never reached the disk.
	WriteAmpNet  num   `json:"write_amp_net"`
	DiskBytes    int64 `json:"disk_bytes"`     // du of the data dir (allocated blocks)
	ApparentSize int64 `json:"apparent_bytes"` // sum of file sizes
	TableBytes   int64 `json:"table_bytes"`    // du of the sstables alone
	LiveBytes    int64 `json:"live_bytes"`
	SpaceAmp     num   `json:"space_amp"` // disk_bytes / live_bytes
	// SpaceAmpFiles uses apparent_bytes instead: it leaves out space a file
	// has allocated beyond its size (Pebble preallocates its WAL).
	SpaceAmpFiles num `json:"space_amp_files"`
	// SpaceAmpTables uses table_bytes: the LSM's data layout alone.
	SpaceAmpTables num `json:"space_amp_tables"`

	PeakRSS        int64 `json:"peak_rss"`         // VmHWM over the measured phase
	PeakRSSProcess int64 `json:"peak_rss_process"` // over the whole child, setup included

	// CPU time of the whole child, from the parent's wait4.
	UserSeconds float64 `json:"user_seconds,omitempty"`
	SysSeconds  float64 `json:"sys_seconds,omitempty"`
	// CPUSeconds is the child's CPU time (user and system, every thread:
	// the engine's background work too) over the measured phase.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`

	// Latency of an operation (a batch for batch100) in the measured
	// phase, in microseconds.
	P50Micros  num `json:"p50_us"`
	P99Micros  num `json:"p99_us"`
	P999Micros num `json:"p999_us,omitempty"`
	MaxMicros  num `json:"max_us"`
	// MaxWriteMicros is the longest write of a workload that mixes reads
	// and writes (ycsba).
	MaxWriteMicros num `json:"max_write_us,omitempty"`

	// The large run: a chain's child reports each workload as a phase,
	// and samples of the engine's shape over the whole chain. Its fill
	// phase says how long the compaction debt took to drain afterwards,
	// how much was left (-1: the engine does not estimate it) and how many
	// bytes it wrote meanwhile.
	Phases          []result `json:"phases,omitempty"`
	Samples         []sample `json:"samples,omitempty"`
	DrainSeconds    float64  `json:"drain_seconds,omitempty"`
	DebtAfterDrain  int64    `json:"debt_after_drain,omitempty"`
	DrainWriteBytes int64    `json:"drain_write_bytes,omitempty"`

	// Stalls are the engine's write stalls over the child's whole life
	// (a prefill included); nil for an engine that does not count them.
	Stalls *stalls `json:"stalls,omitempty"`

	Wrong       int64  `json:"wrong"`
	EngineStats any    `json:"engine_stats,omitempty"`
	Error       string `json:"error,omitempty"`
}

// stalls is an engine's count of write stalls and the longest of them.
type stalls struct {
	Count         int64 `json:"count"`
	LongestMicros num   `json:"longest_us"`
}

// childMain is the hidden child subcommand.
func childMain(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	specJSON := fs.String("spec", "", "run spec (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
		return fmt.Errorf("child: bad -spec: %w", err)
	}
	res, err := runChild(spec)
	if err != nil {
		res.Error = err.Error()
	}
	if werr := json.NewEncoder(stdout).Encode(res); werr != nil && err == nil {
		err = werr
	}
	return err
}

// runChild runs one workload on one engine in spec.Dir and measures it,
// or, for the large run, the chain of workloads spec.Chain names (see
// runChain). The result is filled as far as the run got, also on error.
func runChild(spec childSpec) (result, error) {
	if len(spec.Chain) > 0 {
		return runChain(spec)
	}
	res := result{Engine: spec.Engine, Workload: spec.Workload, Repeat: spec.Repeat, N: spec.Params.N}
	w, err := findWorkload(spec.Workload)
	if err != nil {
		return res, err
	}
	if err := checkKeySpace(spec.Params.N); err != nil {
		return res, err
	}
	err = withEngine(spec, func(e Engine) error {
		if w.Prefill {
			t := time.Now()
			if err := prefill(e, spec.Params); err != nil {
				return fmt.Errorf("prefill: %w", err)
			}
			res.SetupSeconds = time.Since(t).Seconds()
		}
		return measure(&res, e, w, spec)
	})
	return res, err
}

// withEngine opens spec's engine in spec.Dir, runs body on it and closes
// it. After a body that succeeded, a failed close is the run's error, and
// sync(2) leaves nothing dirty for the next run to pay for.
func withEngine(spec childSpec, body func(Engine) error) error {
	e, err := openEngine(spec.Engine, spec.Dir, spec.Config)
	if err != nil {
		return fmt.Errorf("open %s: %w", spec.Engine, err)
	}
	if err := body(e); err != nil {
		_ = e.Close()
		return err
	}
	if err := e.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	syscall.Sync()
	return nil
}

// measure runs w on the open engine as a measured phase and fills res
// with what it did and cost.
func measure(res *result, e Engine, w workload, spec childSpec) error {
	// Start the measured phase from a clean slate: the setup's garbage
	// returned to the OS, its dirty pages written back, the RSS peak reset.
	debug.FreeOSMemory()
	syscall.Sync()
	var err error
	if res.PeakRSSProcess, _, err = memStatus(); err != nil {
		return err
	}
	if err := resetPeakRSS(); err != nil {
		return fmt.Errorf("reset peak RSS: %w", err)
	}
	before, err := readProcIO()
	if err != nil {
		return err
	}
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}

	cpu0, err := rusage.Self()
	if err != nil {
		return fmt.Errorf("CPU time: %w", err)
	}
	t0 := time.Now()
	ph, runErr := w.Run(e, spec.Params)
	elapsed := time.Since(t0)
	cpu1, err := rusage.Self()
	if err != nil {
		return fmt.Errorf("CPU time: %w", err)
	}
	res.CPUSeconds = (cpu1.CPU - cpu0.CPU).Seconds()

	if spec.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	// Linux charges write_bytes when a page is dirtied, so the counter
	// already holds buffered writes; sync(2) still writes them back before
	// the counters and du are read, so that what is counted is on disk for
	// every engine alike and the next run starts with no dirty pages.
	t1 := time.Now()
	syscall.Sync()
	res.SyncSeconds = time.Since(t1).Seconds()
	after, err := readProcIO()
	if err != nil {
		return err
	}
	res.IO = after.sub(before)

	res.Ops, res.Entries, res.Wrong = ph.Ops, ph.Entries, ph.Wrong
	micros := func(d time.Duration) num { return num(float64(d) / float64(time.Microsecond)) }
	res.P50Micros, res.P99Micros, res.MaxMicros = micros(ph.Lat.quantile(0.5)), micros(ph.Lat.quantile(0.99)), micros(ph.Lat.max)
	res.P999Micros = micros(ph.Lat.quantile(0.999))
	res.MaxWriteMicros = micros(ph.LongestWrite)
	res.Seconds = elapsed.Seconds()
	if res.Seconds > 0 {
		res.OpsPerSec = float64(res.Ops) / res.Seconds
	}
	res.LogicalBytes = ph.LogicalBytes
	res.WriteAmp = num(ratio(float64(res.IO.WriteBytes), float64(res.LogicalBytes)))
	res.WriteAmpNet = num(ratio(float64(res.IO.WriteBytes-res.IO.CancelledWriteBytes), float64(res.LogicalBytes)))
	res.LiveBytes = ph.LiveBytes
	du, err := diskUsage(spec.Dir)
	if err != nil {
		return err
	}
	res.DiskBytes, res.ApparentSize, res.TableBytes = du.Allocated, du.Apparent, du.Tables
	res.SpaceAmp = num(ratio(float64(res.DiskBytes), float64(res.LiveBytes)))
	res.SpaceAmpFiles = num(ratio(float64(res.ApparentSize), float64(res.LiveBytes)))
	res.SpaceAmpTables = num(ratio(float64(res.TableBytes), float64(res.LiveBytes)))
	if res.PeakRSS, _, err = memStatus(); err != nil {
		return err
	}
	res.PeakRSSProcess = max(res.PeakRSSProcess, res.PeakRSS)
	res.EngineStats = e.Stats()
	if sr, ok := e.(stallReporter); ok {
		count, longest := sr.Stalls()
		res.Stalls = &stalls{Count: count, LongestMicros: micros(longest)}
	}
	if runErr != nil {
		return runErr
	}
	if res.Ops == 0 {
		return errors.New("workload did no operations")
	}
	return nil
}
