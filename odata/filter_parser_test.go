package odata

import (
	"strings"
	"testing"
)

func TestParseFilterValid(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"   ", ""},
		{"PartitionKey eq 'a'", "PartitionKey eq 'a'"},
		{"'a' eq PartitionKey", "PartitionKey eq 'a'"},
		{"'a' lt PartitionKey", "PartitionKey gt 'a'"},
		{"5 ge Age", "Age le 5"},
		{"Name eq 'it''s'", "Name eq 'it''s'"},
		{"Name eq ''", "Name eq ''"},
		{"A eq 1 and B eq 2 or C eq 3", "((A eq 1 and B eq 2) or C eq 3)"},
		{"A eq 1 or B eq 2 and C eq 3", "(A eq 1 or (B eq 2 and C eq 3))"},
		{"not A eq 1 and B eq 2", "((not A eq 1) and B eq 2)"},
		{"not (A eq 1 or B eq 2)", "(not (A eq 1 or B eq 2))"},
		{"not not A", "(not (not A))"},
		{"(PartitionKey eq '')or(BoolField eq false)", "(PartitionKey eq '' or BoolField eq false)"},
		{"((A eq 1))", "A eq 1"},
		{"A EQ 1 AND B Ne 2 Or NOT C", "((A eq 1 and B ne 2) or (not C))"},
		{"Active", "Active"},
		{"not Active", "(not Active)"},
		{"true", "true"},
		{"TRUE", "true"},
		{"False", "false"},
		{"Flag eq True", "Flag eq true"},
		{"N eq 2147483647", "N eq 2147483647"},
		{"N eq -2147483648", "N eq -2147483648"},
		{"N eq 123L", "N eq 123L"},
		{"N eq 9223372036854775807L", "N eq 9223372036854775807L"},
		{"N eq -9223372036854775808l", "N eq -9223372036854775808L"},
		{"D eq 1.5", "D eq 1.5"},
		{"D eq 2.0", "D eq 2.0"},
		{"D eq 2D", "D eq 2.0"},
		{"D eq 1e10", "D eq 10000000000.0"},
		{"D eq 1.5E-3", "D eq 0.0015"},
		{"D eq NaN", "D eq NaN"},
		{"D lt INF and D gt -INF", "(D lt INF and D gt -INF)"},
		{"T ge datetime'2024-01-02T03:04:05Z'", "T ge datetime'2024-01-02T03:04:05Z'"},
		{"T ge DateTime'2024-01-02T03:04:05.1234567Z'", "T ge datetime'2024-01-02T03:04:05.1234567Z'"},
		{"G eq guid'C9DA6455-213D-42C9-9A79-3E9149A57833'", "G eq guid'c9da6455-213d-42c9-9a79-3e9149a57833'"},
		{"B eq X'0aFF'", "B eq X'0aff'"},
		{"B eq binary'00'", "B eq X'00'"},
		{"B eq X''", "B eq X''"},
		{"Ünïcode eq 'ü'", "Ünïcode eq 'ü'"},
		{"_x1 eq 1", "_x1 eq 1"},
		{"1 eq 1", "true"},
		{"1 eq 2", "false"},
		{"\tA\neq\r1 ", "A eq 1"},
		{"TableName ge 'a' and TableName lt 'b'", "(TableName ge 'a' and TableName lt 'b')"},
	} {
		f, err := ParseFilter(tc.in)
		if err != nil {
			t.Errorf("ParseFilter(%q): %v", tc.in, err)
			continue
		}
		if got := f.String(); got != tc.want {
			t.Errorf("ParseFilter(%q) = %s, want %s", tc.in, got, tc.want)
			continue
		}
		// The canonical text parses back to itself.
		if f2, err := ParseFilter(f.String()); err != nil || f2.String() != tc.want {
			t.Errorf("reparse of %q: %v, %v", tc.want, f2, err)
		}
	}
}

func TestParseFilterErrors(t *testing.T) {
	comparisons := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = "A eq " + itoa(i)
		}
		return strings.Join(parts, " and ")
	}
	sixteenth := len(comparisons(15)) + len(" and ")
	for _, tc := range []struct {
		in   string
		pos  int
		text string // part of the message
	}{
		{"A eq", 4, "end of filter"},
		{"A eq 1 and", 10, "end of filter"},
		{"A eq 'abc", 5, "unterminated string"},
		{"A eq 1)", 6, `")"`},
		{"(A eq 1", 7, "')'"},
		{"A eq 1 B eq 2", 7, `"B"`},
		{"A add 1 eq 2", 2, "arithmetic"},
		{"A eq 1 + 2", 7, "arithmetic"},
		{"A mul 2 eq 4", 2, "arithmetic"},
		{"startswith(A,'x')", 0, "function"},
		{"substringof('x', A)", 0, "function"},
		{"A eq null", 5, "null"},
		{"1", 0, "not a boolean"},
		{"'abc'", 0, "not a boolean"},
		{"datetime'2024-01-01T00:00:00Z'", 0, "not a boolean"},
		{"PartitionKey", 0, "not a boolean"},
		{"A eq B", 5, "compare with a literal"},
		{"A eq 2147483648", 5, "Edm.Int32"},
		{"A eq -2147483649", 5, "Edm.Int32"},
		{"A eq 9223372036854775808L", 5, "out of range"},
		{"A eq 1e999", 5, "out of range"},
		{"A eq 1.5L", 5, "unsupported numeric"},
		{"A eq 1.5M", 5, "unsupported numeric"},
		{"A eq 1.", 5, "malformed number"},
		{"A eq 1e", 5, "malformed number"},
		{"A eq 12abc", 5, "malformed number"},
		{"A eq datetime'yesterday'", 5, "malformed datetime"},
		{"A eq datetime'1600-01-01T00:00:00Z'", 5, "outside"},
		{"A eq guid'xyz'", 5, "malformed guid"},
		{"A eq X'abc'", 5, "malformed binary"},
		{"A eq X'zz'", 5, "malformed binary"},
		{"A eq time'12:00'", 5, "unsupported literal type"},
		{`A eq "x"`, 5, "single quotes"},
		{"A eq 1 && B eq 2", 7, "unexpected character"},
		{"A == 1", 2, "unexpected character"},
		{"A eq -B", 5, "arithmetic"},
		{"not", 3, "end of filter"},
		{"()", 1, `")"`},
		{"A eq eq", 5, `"eq"`},
		{comparisons(16), sixteenth, "more than 15"},
		{strings.Repeat("(", 200) + "A" + strings.Repeat(")", 200), 100, "nested too deeply"},
		{strings.Repeat("not ", 200) + "A", 400, "nested too deeply"},
		{strings.Repeat("true and ", 100) + "true", 900, "more than 100 terms"},
	} {
		_, err := ParseFilter(tc.in)
		e, ok := err.(*Error)
		if !ok {
			t.Errorf("ParseFilter(%.60q) = %v, want an *Error", tc.in, err)
			continue
		}
		if e.Code != CodeInvalidInput || e.Pos != tc.pos || !strings.Contains(e.Message, tc.text) {
			t.Errorf("ParseFilter(%.60q):\n got %s at %d\nwant %q at %d", tc.in, e.Message, e.Pos, tc.text, tc.pos)
		}
	}
	if _, err := ParseFilter(comparisons(15)); err != nil {
		t.Errorf("15 comparisons rejected: %v", err)
	}
}
