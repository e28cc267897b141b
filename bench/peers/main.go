// Command peers benchmarks Tabula against peer systems, one suite at a
// time, and reports every figure as a ratio to Pebble measured in the same
// run: the machine is shared and noisy, so only same-run ratios mean much.
//
//	go -C bench/peers run . engine [flags]   Tabula's lsm vs Pebble vs goleveldb
//	go -C bench/peers run . all [flags]      every suite, into one output folder
//
// Each (engine, workload, repeat) runs in its own child process, this
// binary re-executed with the hidden child subcommand, on a fresh data
// directory, so that the I/O counters and the RSS peak it reports belong to
// one engine alone. It is a module of its own so that Tabula's go.mod never
// depends on the peers. bench/RESULTS.md describes every figure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// suite is one family of benchmarks, run by a subcommand of its name. Each
// parses its own flags, which include the common ones (so all can pass
// those to every suite).
type suite struct {
	name    string
	summary string
	run     func(args []string, log io.Writer) error
}

func suites() []suite {
	return []suite{
		{name: "engine", summary: "Tabula's lsm engine vs Pebble and goleveldb: fills, reads, scans, batches, synced writes", run: runEngineSuite},
	}
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "peers:", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, log io.Writer) error {
	if len(args) == 0 {
		usage(log)
		return flag.ErrHelp
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "child":
		return childMain(rest, stdout)
	case "all":
		return runAll(rest, log)
	case "help", "-h", "-help", "--help":
		usage(log)
		return nil
	default:
		for _, s := range suites() {
			if s.name == cmd {
				return s.run(rest, log)
			}
		}
		usage(log)
		return fmt.Errorf("unknown suite %q", cmd)
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: go -C bench/peers run . SUITE [flags]\n\nSuites:\n")
	for _, s := range suites() {
		fmt.Fprintf(w, "  %-8s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, "  %-8s every suite above, with its defaults and the common flags given\n", "all")
	fmt.Fprintf(w, "\nRun a suite with -h for its flags.\n")
}

// runAll runs every suite into one output folder. It accepts only the
// common flags: suite-specific ones belong on the suite's own subcommand.
func runAll(args []string, log io.Writer) error {
	var c common
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	fs.SetOutput(log)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.out == "" {
		out, err := defaultOut()
		if err != nil {
			return err
		}
		args = append([]string{"-out", out}, args...)
	}
	var failed []string
	for _, s := range suites() {
		fmt.Fprintf(log, "== suite %s\n", s.name)
		if err := s.run(args, log); err != nil {
			fmt.Fprintf(log, "suite %s: %v\n", s.name, err)
			failed = append(failed, s.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("suites failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// common are the flags every suite takes.
type common struct {
	out     string
	tmpdir  string
	repeats int
	timeout time.Duration
	verbose bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.out, "out", "", "output folder; a relative path is relative to bench/peers under go -C (default bench/results/<timestamp>)")
	fs.StringVar(&c.tmpdir, "tmpdir", "", "where the runs' data directories go; must be a real disk, not tmpfs (default: the OS temp dir)")
	fs.IntVar(&c.repeats, "repeats", 3, "repeats of every run; the report takes medians")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Minute, "limit on one child run")
	fs.BoolVar(&c.verbose, "v", false, "pass the child processes' stderr through")
}

func (c *common) check() error {
	if c.repeats < 1 {
		return errors.New("-repeats must be at least 1")
	}
	return nil
}

// suiteEnv is what setup prepares for a suite's runs.
type suiteEnv struct {
	out  string // output folder, created
	repo string // repository root
	run  *runner
}

// setup creates the output folder and checks the data root.
func (c *common) setup(log io.Writer) (*suiteEnv, error) {
	bench, err := benchDir()
	if err != nil && c.out == "" {
		return nil, err
	}
	env := &suiteEnv{out: c.out, repo: filepath.Dir(bench)}
	if env.out == "" {
		if env.out, err = defaultOut(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(env.out, 0o755); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tmp := c.tmpdir
	if tmp == "" {
		tmp = os.TempDir()
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	if err := checkDataRoot(tmp, env.repo, log); err != nil {
		return nil, err
	}
	env.run = &runner{exe: exe, tmpRoot: tmp, timeout: c.timeout, verbose: c.verbose, log: log}
	return env, nil
}

// defaultOut is bench/results/<timestamp>.
func defaultOut() (string, error) {
	bench, err := benchDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(bench, "results", time.Now().Format("2006-01-02T15-04-05")), nil
}
