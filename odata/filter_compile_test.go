package odata

import (
	"strings"
	"testing"
)

func rangesString(rs []KeyRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, " ")
}

func TestCompileBounds(t *testing.T) {
	for _, tc := range []struct {
		filter, ranges, residual string
	}{
		{"", "[-inf, +inf)", ""},
		{"PartitionKey eq 'a'", "[('a',''), after 'a')", ""},
		{"PartitionKey eq 'a' and RowKey eq 'b'", "[('a','b'), ('a','b')+)", ""},
		{"RowKey eq 'b' and PartitionKey eq 'a'", "[('a','b'), ('a','b')+)", ""},
		{"PartitionKey eq 'a' and RowKey ge 'x' and RowKey lt 'y'", "[('a','x'), ('a','y'))", ""},
		{"PartitionKey eq 'a' and RowKey gt 'x' and RowKey le 'y'", "[('a','x')+, ('a','y')+)", ""},
		{"PartitionKey ge 'a' and PartitionKey lt 'c'", "[('a',''), ('c',''))", ""},
		{"PartitionKey gt 'a' and PartitionKey le 'c'", "[after 'a', after 'c')", ""},
		{"PartitionKey eq 'a' or PartitionKey eq 'c'", "[('a',''), after 'a') [('c',''), after 'c')", ""},
		{"PartitionKey ne 'a'", "[-inf, ('a','')) [after 'a', +inf)", ""},
		{"not (PartitionKey lt 'x')", "[('x',''), +inf)", ""},
		{"not (PartitionKey eq 'a' or PartitionKey eq 'b')", "[-inf, ('a','')) [after 'a', ('b','')) [after 'b', +inf)", ""},
		{"PartitionKey eq 'a' and PartitionKey eq 'b'", "", ""},
		{"PartitionKey eq 'a' and RowKey gt 'b' and RowKey lt 'b'", "", ""},
		{"PartitionKey eq 5", "", ""}, // a key never equals a number
		{"PartitionKey eq 'p' and (RowKey eq 'a' or RowKey eq 'b')", "[('p','a'), ('p','a')+) [('p','b'), ('p','b')+)", ""},
		{"(PartitionKey eq 'p' and RowKey eq 'a') or (PartitionKey eq 'q' and RowKey eq 'b')", "[('p','a'), ('p','a')+) [('q','b'), ('q','b')+)", ""},
		// RowKey bounds across partitions only trim the first and last.
		{"PartitionKey ge 'a' and RowKey ge 'x'", "[('a','x'), +inf)", "RowKey ge 'x'"},
		{"PartitionKey ge 'a' and PartitionKey le 'c' and RowKey lt 'm'", "[('a',''), ('c','m'))", "RowKey lt 'm'"},
		{"RowKey eq 'x'", "[-inf, +inf)", "RowKey eq 'x'"},
		{"PartitionKey eq 'a' and RowKey ne 'x'", "[('a',''), after 'a')", "RowKey ne 'x'"},
		// Other conditions stay in the residual.
		{"PartitionKey eq 'a' and Age gt 30", "[('a',''), after 'a')", "Age gt 30"},
		{"Age gt 30 and PartitionKey eq 'a' and Name eq 'x'", "[('a',''), after 'a')", "(Age gt 30 and Name eq 'x')"},
		{"PartitionKey eq 'a' or Age gt 30", "[-inf, +inf)", "(PartitionKey eq 'a' or Age gt 30)"},
		{"(PartitionKey eq 'a' or PartitionKey eq 'b') and Active", "[('a',''), after 'a') [('b',''), after 'b')", "Active"},
		{"PartitionKey eq 'a' and (RowKey eq 'x' or Age eq 1)", "[('a',''), after 'a')", "(RowKey eq 'x' or Age eq 1)"},
		{"false", "", ""},
		{"true", "[-inf, +inf)", ""},
		{"not Active", "[-inf, +inf)", "(not Active)"},
		{"PartitionKey ge 'a' and PartitionKey lt 'a'", "", ""},
	} {
		p, err := PlanQuery(tc.filter)
		if err != nil {
			t.Errorf("%q: %v", tc.filter, err)
			continue
		}
		if got := rangesString(p.Ranges); got != tc.ranges {
			t.Errorf("%q: ranges\n got %s\nwant %s", tc.filter, got, tc.ranges)
		}
		if got := p.Residual.String(); got != tc.residual {
			t.Errorf("%q: residual %q, want %q", tc.filter, got, tc.residual)
		}
	}
}

func TestKeyRangeHelpers(t *testing.T) {
	p, _ := PlanQuery("PartitionKey eq 'a' and RowKey eq 'b'")
	if pk, rk, ok := p.Ranges[0].Point(); !ok || pk != "a" || rk != "b" {
		t.Errorf("Point = %q %q %v", pk, rk, ok)
	}
	if pk, ok := p.Ranges[0].Partition(); !ok || pk != "a" {
		t.Errorf("Partition = %q %v", pk, ok)
	}
	p, _ = PlanQuery("PartitionKey ge 'a' and PartitionKey lt 'c'")
	r := p.Ranges[0]
	for _, tc := range []struct {
		pk, rk string
		in     bool
	}{{"a", "", true}, {"b", "zz", true}, {"c", "", false}, {"", "", false}, {"a\x00", "x", true}} {
		if got := r.Contains([]byte(tc.pk), []byte(tc.rk)); got != tc.in {
			t.Errorf("Contains(%q,%q) = %v", tc.pk, tc.rk, got)
		}
	}
	if !FullRange.IsFull() || r.IsFull() {
		t.Error("IsFull")
	}
}

func TestCompileTableFilter(t *testing.T) {
	for _, tc := range []struct {
		filter string
		ranges []NameRange
		match  map[string]bool
	}{
		{"TableName eq 'abc'", []NameRange{{Lower: "abc", Upper: "abc", HasLower: true, HasUpper: true, LowerInclusive: true, UpperInclusive: true}},
			map[string]bool{"abc": true, "abd": false}},
		{"TableName ge 'a' and TableName lt 'b'", []NameRange{{Lower: "a", Upper: "b", HasLower: true, HasUpper: true, LowerInclusive: true}},
			map[string]bool{"a": true, "azz": true, "b": false}},
		{"TableName gt 'm'", []NameRange{{Lower: "m", HasLower: true}}, map[string]bool{"m": false, "n": true}},
		{"not (TableName le 'm')", []NameRange{{Lower: "m", HasLower: true}}, map[string]bool{"m": false, "n": true}},
		{"", []NameRange{{}}, map[string]bool{"x": true}},
	} {
		p, err := PlanTableQuery(tc.filter)
		if err != nil {
			t.Errorf("%q: %v", tc.filter, err)
			continue
		}
		if len(p.Ranges) != len(tc.ranges) {
			t.Errorf("%q: ranges %+v, want %+v", tc.filter, p.Ranges, tc.ranges)
			continue
		}
		for i := range p.Ranges {
			if p.Ranges[i] != tc.ranges[i] {
				t.Errorf("%q: range %+v, want %+v", tc.filter, p.Ranges[i], tc.ranges[i])
			}
		}
		for name, want := range tc.match {
			in := false
			for _, r := range p.Ranges {
				in = in || r.Contains(name)
			}
			if got := in && p.Match(name); got != want {
				t.Errorf("%q on %q = %v, want %v", tc.filter, name, got, want)
			}
		}
	}
	// Other properties do not exist on a table: comparisons with them fail.
	p, err := PlanTableQuery("TableName eq 'a' or Foo eq 1")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Match("a") || p.Match("b") {
		t.Error("table residual")
	}
}
