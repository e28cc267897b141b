package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// runner starts one child process per run, each on a fresh directory, so
// that /proc/self/io and the RSS peak the child reports are its engine's
// alone and no run inherits another's page cache dirt or open files.
type runner struct {
	exe     string // this binary, re-executed with the child subcommand
	tmpRoot string // where the runs' data directories are made
	timeout time.Duration
	verbose bool // pass the children's stderr through
	log     io.Writer
}

// run runs spec in a child. The data directory is made here and removed
// afterwards; spec.Dir is set by run.
func (r *runner) run(spec childSpec) (result, error) {
	dir, err := os.MkdirTemp(r.tmpRoot, fmt.Sprintf("tabula-bench-%s-%s-", spec.Engine, spec.Workload))
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	spec.Dir = dir
	js, err := json.Marshal(spec)
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.exe, "child", "-spec", string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if r.verbose {
		cmd.Stderr = io.MultiWriter(&stderr, r.log)
	}
	runErr := cmd.Run()

	var res result
	if err := decodeLastJSON(stdout.Bytes(), &res); err != nil {
		return res, childError(spec, fmt.Errorf("no result (%v): %w", runErr, err), stderr.Bytes())
	}
	if ps := cmd.ProcessState; ps != nil {
		res.UserSeconds = ps.UserTime().Seconds()
		res.SysSeconds = ps.SystemTime().Seconds()
	}
	if res.Error != "" {
		return res, childError(spec, errors.New(res.Error), stderr.Bytes())
	}
	if runErr != nil {
		return res, childError(spec, runErr, stderr.Bytes())
	}
	return res, nil
}

// decodeLastJSON decodes the last non-empty line of out: an engine that
// prints to stdout must not break the protocol.
func decodeLastJSON(out []byte, v any) error {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	last := lines[len(lines)-1]
	if len(last) == 0 {
		return errors.New("empty output")
	}
	return json.Unmarshal(last, v)
}

func childError(spec childSpec, err error, stderr []byte) error {
	msg := fmt.Sprintf("%s %s repeat %d: %v", spec.Engine, spec.Workload, spec.Repeat, err)
	if tail := lastLines(stderr, 10); tail != "" {
		msg += "\nchild stderr:\n" + tail
	}
	return errors.New(msg)
}

func lastLines(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checkDataRoot refuses a RAM-backed directory (the engines' writes would
// never reach a disk, so write amplification and sync costs would be
// fiction) and says if it is not on the repository's filesystem.
func checkDataRoot(root, repo string, log io.Writer) error {
	t, err := fsType(root)
	if err != nil {
		return fmt.Errorf("data directory %s: %w", root, err)
	}
	if t == "tmpfs" || t == "ramfs" {
		return fmt.Errorf("data directory %s is on %s, not a disk: pass -tmpdir with a directory on a real filesystem", root, t)
	}
	var a, b syscall.Stat_t
	if syscall.Stat(root, &a) == nil && syscall.Stat(repo, &b) == nil && a.Dev != b.Dev {
		fmt.Fprintf(log, "note: data directory %s is not on the repository's filesystem\n", root)
	}
	return nil
}

// benchDir finds the repository's bench/ directory from the working
// directory (go -C bench/peers run . starts in bench/peers), for the
// default output folder.
func benchDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for _, cand := range []string{filepath.Dir(wd), filepath.Join(wd, "bench")} {
		if _, err := os.Stat(filepath.Join(cand, "peers", "go.mod")); err == nil {
			return cand, nil
		}
	}
	return "", fmt.Errorf("cannot find bench/ from %s: pass -out", wd)
}

// progress prints one overwritten status line on stderr, and only when
// stderr is a terminal: logs and CI output stay clean.
type progress struct {
	w       io.Writer
	on      bool
	total   int
	done    int
	started time.Time
}

func newProgress(total int) *progress {
	fi, err := os.Stderr.Stat()
	on := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progress{w: os.Stderr, on: on, total: total, started: time.Now()}
}

func (p *progress) start(what string) {
	if p.on {
		fmt.Fprintf(p.w, "\r\033[K[%d/%d %s] %s", p.done+1, p.total, time.Since(p.started).Round(time.Second), what)
	}
}

func (p *progress) finish() {
	p.done++
	if p.on && p.done == p.total {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
