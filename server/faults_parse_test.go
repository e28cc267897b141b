package server

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseFaultSpec parses every form of the grammar and checks the
// canonical form it formats to, which must parse to an equal spec.
func TestParseFaultSpec(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"  ;  ; ", ""},
		{"seed=7", "seed=7"},
		{"seed=18446744073709551615", "seed=18446744073709551615"},
		{"503=0.05", "503=0.05"},
		{"503=5%", "503=0.05"},
		{"503=0", ""},
		{"503=1", "503=1"},
		{"503=100%", "503=1"},
		{"503=5e-2", "503=0.05"},
		{"503=-0", ""},
		{"insert:503=0.05,500=0.02", "insert:503=0.05,500=0.02"},
		{" insert : 503 = 0.05 , 500=0.02 ", "insert:503=0.05,500=0.02"},
		{"insert|update:timeout=0.01", "insert|update:timeout=0.01"},
		{"update|insert:timeout=0.01", "insert|update:timeout=0.01"},
		{"all:reset=0.01", "reset=0.01"},
		{"*:reset=0.01", "reset=0.01"},
		{"insert|*:reset=0.01", "reset=0.01"},
		// phases: defaults are omitted, others kept
		{"timeout.after=0.1", "timeout=0.1"},
		{"timeout.before=0.1", "timeout.before=0.1"},
		{"500.before=0.1", "500=0.1"},
		{"500.after=0.1", "500.after=0.1"},
		{"reset.after=0.1,reset=0.2", "reset=0.2,reset.after=0.1"},
		{"503.before=0.1", "503=0.1"},
		// later settings replace earlier ones, per kind
		{"reset=0.01;insert:reset=0", "update|merge|upsert|delete|batch|get|query|table:reset=0.01"},
		{"insert:503=0.1;insert:503=0.2", "insert:503=0.2"},
		{"503=0.1;get:500=0.1", "insert|update|merge|upsert|delete|batch|query|table:503=0.1;get:503=0.1,500=0.1"},
		// latency
		{"query:latency=50ms..200ms", "query:latency=50ms..200ms"},
		{"latency=50ms", "latency=50ms"},
		{"latency=1.5s", "latency=1.5s"},
		{"latency=0s", ""},
		{"latency=0", ""},
		{"latency=7ms..7ms", "latency=7ms"},
		{"latency=0..0", ""},
		{"latency=0..10ms", "latency=0s..10ms"},
		{"latency=exp(20ms)", "latency=exp(20ms)"},
		{"latency=exp( 20ms )", "latency=exp(20ms)"},
		{"latency=exp(0s)", ""},
		{"latency=1m", "latency=1m0s"},
		{"get:latency=5ms,503=0.1", "get:503=0.1,latency=5ms"},
		// outages
		{"unavailable=orders@10s", "unavailable=orders@10s"},
		{"unavailable=Orders/2024@2s+10s", "unavailable=orders/2024@2s+10s"},
		{"unavailable=orders/@0s+1s", "unavailable=orders@1s"},
		{"unavailable=orders/a%20b%3B%40@1s", "unavailable=orders/a%20b%3B%40@1s"},
		{"unavailable=orders/a/b@1s", "unavailable=orders/a/b@1s"},
		{"unavailable=orders/%c3%a9@1s", "unavailable=orders/%C3%A9@1s"},
		{"unavailable=a12/x@1s;unavailable=b12/y@2s", "unavailable=a12/x@1s;unavailable=b12/y@2s"},
		{"unavailable=orders@24h", "unavailable=orders@24h0m0s"},
		// the brief's example
		{"seed=7;insert:503=0.05,500=0.02;query:latency=50ms..200ms;reset=0.01;unavailable=table/pkprefix@10s",
			"seed=7;insert:503=0.05,500=0.02,reset=0.01;update|merge|upsert|delete|batch|get|table:reset=0.01;query:reset=0.01,latency=50ms..200ms;unavailable=table/pkprefix@10s"},
		// rates that add up to exactly 1, with floating-point error
		{"503=0.1,500=0.2,timeout=0.7", "503=0.1,500=0.2,timeout=0.7"},
	} {
		fs, err := ParseFaultSpec(c.in)
		if err != nil {
			t.Errorf("ParseFaultSpec(%q): %v", c.in, err)
			continue
		}
		got := fs.String()
		if got != c.want {
			t.Errorf("ParseFaultSpec(%q).String() = %q, want %q", c.in, got, c.want)
		}
		again, err := ParseFaultSpec(got)
		if err != nil {
			t.Errorf("the canonical %q does not parse: %v", got, err)
			continue
		}
		if !reflect.DeepEqual(fs, again) {
			t.Errorf("%q and its canonical %q parse differently:\n%+v\n%+v", c.in, got, fs, again)
		}
	}
}

// TestParseFaultSpecValues checks what the parsed parts hold, beyond their
// formatting.
func TestParseFaultSpecValues(t *testing.T) {
	fs, err := ParseFaultSpec("seed=9;insert:503=0.25,timeout=0.5;get:latency=1ms..3ms;unavailable=Tab/p%3Bq@2s+3s")
	if err != nil {
		t.Fatal(err)
	}
	if !fs.hasSeed || fs.seed != 9 {
		t.Errorf("seed %d %v", fs.seed, fs.hasSeed)
	}
	ins := fs.kinds[kindInsert]
	if ins.rates[failBusy][phaseBefore] != 0.25 || ins.rates[failTimeout][phaseAfter] != 0.5 || ins.rates[failTimeout][phaseBefore] != 0 {
		t.Errorf("insert rates %+v", ins.rates)
	}
	if fs.kinds[kindUpdate] != (kindFaults{}) {
		t.Errorf("update has faults: %+v", fs.kinds[kindUpdate])
	}
	if l := fs.kinds[kindGet].latency; l != (latency{dist: latencyUniform, min: time.Millisecond, max: 3 * time.Millisecond}) {
		t.Errorf("get latency %+v", l)
	}
	want := []unavailability{{table: "tab", prefix: "p;q", start: 2 * time.Second, dur: 3 * time.Second}}
	if !reflect.DeepEqual(fs.down, want) {
		t.Errorf("outages %+v, want %+v", fs.down, want)
	}
}

// TestParseFaultSpecErrors checks that every malformed spec is refused
// with a message naming its bad part.
func TestParseFaultSpecErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"seed=", `seed ""`},
		{"seed=-1", `seed "-1"`},
		{"seed=1.5", `seed "1.5"`},
		{"seed=18446744073709551616", `seed "18446744073709551616"`},
		{"seed=1;seed=2", "seed is given twice"},
		{"503", `"503": want name=value`},
		{"503=", "503=: want a rate"},
		{"503=x", "503=x: want a rate"},
		{"503=NaN", "503=NaN: want a rate"},
		{"503=Inf", "503=Inf: want a rate"},
		{"503=0x1p-2", "503=0x1p-2: want a rate"},
		{"503=1.01", "503=1.01: a rate is from 0 to 1"},
		{"503=-0.1", "503=-0.1: a rate is from 0 to 1"},
		{"503=101%", "503=101%: a rate is from 0 to 1"},
		{"503=5%%", "503=5%%: want a rate"},
		{"504=0.1", `unknown fault "504"`},
		{"503.after=0.1", "503.after: ServerBusy refuses a request before it runs"},
		{"500.during=0.1", `the phase is before or after, not "during"`},
		{"insert:503=0.1,", `"": want name=value`},
		{"inserts:503=0.1", `unknown operation "inserts"`},
		{"insert|:503=0.1", `unknown operation ""`},
		{":503=0.1", `unknown operation ""`},
		{"insert:503=0.6;500=0.5", "the failure rates of insert add up to 1.1, more than 1"},
		{"get:503=0.5,500=0.3,reset=0.3", "the failure rates of get add up to 1.1"},
		{"latency=", `latency=: "" is not a duration`},
		{"latency=5", `latency=5: "5" is not a duration`},
		{"latency=-5ms", `"-5ms": a duration cannot be negative`},
		{"latency=2m", `"2m": at most 1m0s`},
		{"latency=10ms..5ms", "the range's low end 10ms is past its high end 5ms"},
		{"latency=10ms..", `"" is not a duration`},
		{"latency=exp(20ms", "exp( needs its )"},
		{"latency=exp(-1s)", "a duration cannot be negative"},
		{"unavailable=orders", "want TABLE[/PREFIX]@[START+]DURATION"},
		{"unavailable=or@1s", `"or" is not a table name`},
		{"unavailable=1orders@1s", `"1orders" is not a table name`},
		{"unavailable=ord-ers@1s", `"ord-ers" is not a table name`},
		{"unavailable=@1s", `"" is not a table name`},
		{"unavailable=orders/a b@1s", `the prefix "a b": ' ' must be percent-encoded (%20)`},
		{"unavailable=orders/a%2@1s", "a % must be followed by two hex digits"},
		{"unavailable=orders/a%zz@1s", "a % must be followed by two hex digits"},
		{"unavailable=orders@0s", "the duration must be more than 0"},
		{"unavailable=orders@1s+0s", "the duration must be more than 0"},
		{"unavailable=orders@x", `the duration: "x" is not a duration`},
		{"unavailable=orders@x+1s", `the start: "x" is not a duration`},
		{"unavailable=orders@-1s+1s", "the start: \"-1s\": a duration cannot be negative"},
		{"unavailable=orders@25h", `"25h": at most 24h0m0s`},
	} {
		_, err := ParseFaultSpec(c.in)
		if err == nil {
			t.Errorf("ParseFaultSpec(%q) succeeded, want an error with %q", c.in, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFaultSpec(%q): %v, want it to say %q", c.in, err, c.want)
		}
		if !strings.HasPrefix(err.Error(), "faults: ") {
			t.Errorf("ParseFaultSpec(%q): %v does not start with faults:", c.in, err)
		}
	}
}

// TestFaultDraws checks the injector draws failures at their rates, and
// the same ones for the same seed.
func TestFaultDraws(t *testing.T) {
	fs, err := ParseFaultSpec("seed=3;insert:503=0.1,500=0.05,timeout=0.05,reset.after=0.02;insert:latency=1ms..2ms")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	count := func() (map[string]int, []fault) {
		in := newInjector(fs)
		got := map[string]int{}
		var first []fault
		for i := range n {
			f := in.draw(kindInsert)
			if f.delay < time.Millisecond || f.delay > 2*time.Millisecond {
				t.Fatalf("delay %v outside 1ms..2ms", f.delay)
			}
			if i < 50 {
				first = append(first, f)
			}
			if f.hit {
				got[failureNames[f.f]+[2]string{".before", ".after"}[btoi(f.after)]]++
			}
			if g := in.draw(kindGet); g.hit || g.delay != 0 {
				t.Fatalf("a get, which the spec spares, drew %+v", g)
			}
		}
		return got, first
	}
	got, first := count()
	for name, rate := range map[string]float64{"503.before": 0.1, "500.before": 0.05, "timeout.after": 0.05, "reset.after": 0.02} {
		if r := float64(got[name]) / n; r < rate*0.9 || r > rate*1.1 {
			t.Errorf("%s drawn at %.4f, want %.2f ±10%%", name, r, rate)
		}
	}
	if len(got) != 4 {
		t.Errorf("drew %v", got)
	}
	_, again := count()
	if !reflect.DeepEqual(first, again) {
		t.Error("the same seed drew different faults")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
