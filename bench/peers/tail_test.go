package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestTailRun classifies every operation of small runs of each workload
// (a bound of 0 makes each one slow): the classes account for all of
// them, and a bound no operation reaches classifies none.
func TestTailRun(t *testing.T) {
	for _, workload := range tailWorkloads {
		ops := tailOps(workload, 4000)
		from := ops / 4
		for _, c := range []struct {
			slow     time.Duration
			wantSlow int64
		}{{0, int64(ops - from)}, {time.Hour, 0}} {
			e, err := openEngine("tabula", t.TempDir(), defaultEngineConfig())
			if err != nil {
				t.Fatal(err)
			}
			rep, err := tailRun(e, workload, 4000, from, c.slow, 1)
			if cerr := e.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatalf("%s: %v", workload, err)
			}
			var classified int64
			for _, n := range rep.Count {
				classified += n
			}
			if p50, p99 := rep.Lat.quantile(0.5), rep.Lat.quantile(0.99); rep.Lat.n != uint64(ops-from) || rep.Slow != c.wantSlow || classified != rep.Slow || p50 <= 0 || p99 < p50 {
				t.Errorf("%s, bound %v: %+v; want %d ops measured, %d slow, all classified", workload, c.slow, rep, ops-from, c.wantSlow)
			}
		}
	}
}

func TestTailCommand(t *testing.T) {
	var out, log bytes.Buffer
	if err := run([]string{"tail", "-n", "2000", "-slow", "0"}, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(out.String(), "tabula fillrandom: 1334 ops measured") || !strings.Contains(out.String(), "ops over 0s (100.00%)") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	if err := run([]string{"tail", "-n", "2000", "-workload", "batch100"}, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(out.String(), "tabula batch100: 14 ops measured") {
		t.Errorf("output:\n%s", out.String())
	}
	for _, args := range [][]string{{"-from", "2000"}, {"-workload", "batch100", "-from", "20"}, {"-workload", "readrandom"}, {"-n", "0"}, {"-slow", "-1s"}, {"-engine", "nosuch"}} {
		if err := run(append([]string{"tail", "-n", "2000"}, args...), &out, &log); err == nil {
			t.Errorf("tail %v: no error", args)
		}
	}
}
