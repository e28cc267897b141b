package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestTailFill classifies every set of a small fill (a bound of 0 makes
// each one slow): the classes account for all of them, and a bound no
// set reaches classifies none.
func TestTailFill(t *testing.T) {
	for _, c := range []struct {
		slow     time.Duration
		wantSlow int64
	}{{0, 3000}, {time.Hour, 0}} {
		e, err := openEngine("tabula", t.TempDir(), defaultEngineConfig())
		if err != nil {
			t.Fatal(err)
		}
		rep, err := tailFill(e, 4000, 1000, c.slow, 1)
		if cerr := e.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		var classified int64
		for _, n := range rep.Count {
			classified += n
		}
		if p50, p99 := rep.Lat.quantile(0.5), rep.Lat.quantile(0.99); rep.Lat.n != 3000 || rep.Slow != c.wantSlow || classified != rep.Slow || p50 <= 0 || p99 < p50 {
			t.Errorf("bound %v: %+v; want 3000 sets measured, %d slow, all classified", c.slow, rep, c.wantSlow)
		}
	}
}

func TestTailCommand(t *testing.T) {
	var out, log bytes.Buffer
	if err := run([]string{"tail", "-n", "2000", "-slow", "0"}, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(out.String(), "tabula: 1334 sets measured") || !strings.Contains(out.String(), "sets over 0s (100.00%)") {
		t.Errorf("output:\n%s", out.String())
	}
	for _, args := range [][]string{{"-from", "2000"}, {"-n", "0"}, {"-slow", "-1s"}, {"-engine", "nosuch"}} {
		if err := run(append([]string{"tail", "-n", "2000"}, args...), &out, &log); err == nil {
			t.Errorf("tail %v: no error", args)
		}
	}
}
