package fuzz

import (
	"reflect"
	"testing"

	"github.com/tabuladb/tabula/server"
)

// FuzzFaultSpec feeds serve's --faults parser garbage: it never panics,
// and whatever parses formats to a canonical spec that parses to an equal
// one, and formats to itself.
func FuzzFaultSpec(f *testing.F) {
	for _, s := range []string{
		"",
		"seed=7;insert:503=0.05,500=0.02;query:latency=50ms..200ms;reset=0.01;unavailable=table/pkprefix@10s",
		"503=5%;get|query:latency=exp(20ms);timeout.before=0.01,500.after=0.02",
		"reset=0.01;insert:reset=0",
		"unavailable=Orders/a%20b%3B@2s+10s;unavailable=other@1m",
		"insert:503=0.6;500=0.5",
		"latency=1ms..1ms;*:reset.after=1e-3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := server.ParseFaultSpec(s)
		if err != nil {
			return
		}
		canon := spec.String()
		again, err := server.ParseFaultSpec(canon)
		if err != nil {
			t.Fatalf("%q parses, but its canonical form %q does not: %v", s, canon, err)
		}
		if !reflect.DeepEqual(spec, again) {
			t.Fatalf("%q and its canonical form %q parse differently:\n%#v\n%#v", s, canon, spec, again)
		}
		if c2 := again.String(); c2 != canon {
			t.Fatalf("the canonical form %q formats to %q", canon, c2)
		}
	})
}
