package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestEngineFlagsRefuseBadFillRate: -fill-rate takes sets per second,
// 0 for no cap; a negative or non-finite rate is refused by name rather
// than read as no cap.
func TestEngineFlagsRefuseBadFillRate(t *testing.T) {
	for _, c := range []struct {
		rate string
		ok   bool
	}{{"0", true}, {"180000", true}, {"-1", false}, {"NaN", false}, {"+Inf", false}} {
		var f engineFlags
		fs := flag.NewFlagSet("engine", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse([]string{"-fill-rate", c.rate}); err != nil {
			t.Fatalf("-fill-rate %s: %v", c.rate, err)
		}
		err := f.check()
		if c.ok && err != nil {
			t.Errorf("-fill-rate %s refused: %v", c.rate, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "-fill-rate")) {
			t.Errorf("-fill-rate %s: %v, want a refusal naming the flag", c.rate, err)
		}
	}
}
