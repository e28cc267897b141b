package odata

import (
	"math"
	"math/rand/v2"
	"testing"
)

func evalOn(t *testing.T, filter string, e *Entity) bool {
	t.Helper()
	p, err := PlanQuery(filter)
	if err != nil {
		t.Fatalf("%q: %v", filter, err)
	}
	in := false
	for _, r := range p.Ranges {
		in = in || r.Contains([]byte(e.PartitionKey), []byte(e.RowKey))
	}
	ok, err := p.Match([]byte(e.PartitionKey), []byte(e.RowKey), EncodeEntity(e))
	if err != nil {
		t.Fatalf("%q: %v", filter, err)
	}
	return in && ok
}

func TestEvalSemantics(t *testing.T) {
	ts, _ := ParseDateTime("2024-01-02T03:04:05.1234567Z")
	g, _ := ParseGuid("c9da6455-213d-42c9-9a79-3e9149a57833")
	e := &Entity{PartitionKey: "pk", RowKey: "rk", Timestamp: ts, Properties: []Property{
		{"S", StringValue("hello")},
		{"Empty", StringValue("")},
		{"I", Int32Value(42)},
		{"L", Int64Value(120)},
		{"D", DoubleValue(123.45)},
		{"W", DoubleValue(42)},
		{"N", DoubleValue(math.NaN())},
		{"B", BoolValue(true)},
		{"F", BoolValue(false)},
		{"T", DateTimeValue(ts)},
		{"G", GuidValue(g)},
		{"X", BinaryValue([]byte{1, 2})},
	}}
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		// Missing properties: every comparison is false, ne included.
		{"Missing eq 'x'", false},
		{"Missing ne 'x'", false},
		{"Missing gt ''", false},
		{"Missing lt ''", false},
		{"Missing", false},
		// ...but not negates the false.
		{"not (Missing eq 'x')", true},
		{"not Missing", true},
		// Type mismatch is false, not an error, for every operator.
		{"L eq 120", false},
		{"L ne 120", false},
		{"I eq 42L", false},
		{"S eq 5", false},
		{"S ne 5", false},
		{"I eq '42'", false},
		{"B eq 1", false},
		{"T eq '2024-01-02T03:04:05.1234567Z'", false},
		{"G eq 'c9da6455-213d-42c9-9a79-3e9149a57833'", false},
		{"PartitionKey eq 1", false},
		// Int32 and Double compare as numbers.
		{"D gt 123", true},
		{"D lt 124", true},
		{"I eq 42.0", true},
		{"W eq 42", true},
		{"I lt 42.5", true},
		{"D gt 123L", false},
		// Int64 is numeric, not lexical: 120 is not in [12, 13).
		{"L ge 12L and L lt 13L", false},
		{"L ge 100L and L lt 130L", true},
		{"L gt -1L", true},
		// Strings are ordinal.
		{"S eq 'hello'", true},
		{"S gt 'hell'", true},
		{"S lt 'hellp'", true},
		{"S eq 'Hello'", false},
		{"Empty eq ''", true},
		{"Empty lt 'a'", true},
		{"'hello' eq S", true},
		{"'a' lt S", true},
		// DateTime at full precision.
		{"T eq datetime'2024-01-02T03:04:05.1234567Z'", true},
		{"T eq datetime'2024-01-02T03:04:05.123456Z'", false},
		{"T gt datetime'2024-01-02T03:04:05.1234566Z'", true},
		{"Timestamp eq datetime'2024-01-02T03:04:05.1234567Z'", true},
		{"Timestamp lt datetime'2024-01-02T03:04:05Z'", false},
		// Guid, binary, boolean.
		{"G eq guid'C9DA6455-213D-42C9-9A79-3E9149A57833'", true},
		{"G gt guid'c9da6455-213d-42c9-9a79-3e9149a57832'", true},
		{"X eq X'0102'", true},
		{"X gt binary'01'", true},
		{"X lt X'02'", true},
		{"B", true},
		{"F", false},
		{"not F", true},
		{"B eq true", true},
		{"F lt true", true},
		{"S", false}, // a bare non-boolean property is false
		// NaN compares false except with ne.
		{"N eq NaN", false},
		{"N ne NaN", true},
		{"N gt 0.0", false},
		{"N lt 0.0", false},
		{"D ne NaN", true},
		{"D lt INF", true},
		// Keys.
		{"PartitionKey eq 'pk' and RowKey eq 'rk'", true},
		{"PartitionKey eq 'pk' and RowKey eq 'rj'", false},
		{"RowKey gt 'r'", true},
		{"not (PartitionKey lt 'pk')", true},
		{"PartitionKey ne 'pk'", false},
		// Logic.
		{"true", true},
		{"false", false},
		{"I eq 1 or I eq 42", true},
		{"I eq 42 and S eq 'nope'", false},
		{"not (I eq 42 and S eq 'nope')", true},
		{"", true},
	} {
		if got := evalOn(t, tc.filter, e); got != tc.want {
			t.Errorf("%q = %v, want %v", tc.filter, got, tc.want)
		}
	}
}

// refEval is an independent evaluation of the AST on an in-memory entity.
func refEval(x Expr, e *Entity) bool {
	get := func(name string) (Value, bool) {
		switch name {
		case PartitionKeyName:
			return StringValue(e.PartitionKey), true
		case RowKeyName:
			return StringValue(e.RowKey), true
		case TimestampName:
			return DateTimeValue(e.Timestamp), true
		}
		return e.Get(name)
	}
	switch x := x.(type) {
	case nil:
		return true
	case *LogicalExpr:
		if x.Or {
			return refEval(x.Left, e) || refEval(x.Right, e)
		}
		return refEval(x.Left, e) && refEval(x.Right, e)
	case *NotExpr:
		return !refEval(x.X, e)
	case *ConstExpr:
		return x.Value
	case *BoolPropertyExpr:
		v, ok := get(x.Property)
		return ok && v.Type() == TypeBoolean && v.Bool()
	case *CompareExpr:
		v, ok := get(x.Property)
		return ok && Compare(v, x.Op, x.Value)
	}
	panic("unknown node")
}

// randomLiterals are few per type so that equality is often hit.
var randomLiterals = []string{
	"''", "'a'", "'b'", "'ab'", "'é'", "'\U0001F600'", "'\uE000'",
	"0", "1", "-1", "2147483647", "1L", "0L", "-5L", "9223372036854775807L",
	"0.5", "1.0", "-1.5", "NaN", "INF", "-INF",
	"true", "false",
	"datetime'2024-01-01T00:00:00Z'", "datetime'2024-01-01T00:00:00.0000001Z'", "datetime'1999-12-31T23:59:59Z'",
	"guid'00000000-0000-0000-0000-000000000001'", "guid'ffffffff-0000-0000-0000-000000000000'",
	"X''", "X'00'", "X'0102'",
}

var randomNames = []string{"PartitionKey", "RowKey", "Timestamp", "A", "B", "C", "D"}
var randomOps = []string{"eq", "ne", "gt", "ge", "lt", "le"}

func randomFilter(rng *rand.Rand, depth int, budget *int) string {
	if depth > 3 || *budget <= 1 || rng.IntN(3) == 0 {
		*budget--
		switch rng.IntN(12) {
		case 0:
			return []string{"true", "false"}[rng.IntN(2)]
		case 1:
			return randomNames[3+rng.IntN(4)] // a bare boolean test
		}
		name, lit := randomNames[rng.IntN(len(randomNames))], randomLiterals[rng.IntN(len(randomLiterals))]
		op := randomOps[rng.IntN(len(randomOps))]
		if rng.IntN(4) == 0 {
			return lit + " " + op + " " + name
		}
		return name + " " + op + " " + lit
	}
	switch rng.IntN(5) {
	case 0:
		return "not (" + randomFilter(rng, depth+1, budget) + ")"
	case 1, 2:
		return "(" + randomFilter(rng, depth+1, budget) + " and " + randomFilter(rng, depth+1, budget) + ")"
	}
	return "(" + randomFilter(rng, depth+1, budget) + " or " + randomFilter(rng, depth+1, budget) + ")"
}

var randomKeys = []string{"", "a", "b", "ab", "é", "\U0001F600", "\uE000"}

func randomEntity(rng *rand.Rand) *Entity {
	e := &Entity{
		PartitionKey: randomKeys[rng.IntN(len(randomKeys))],
		RowKey:       randomKeys[rng.IntN(len(randomKeys))],
	}
	ts, _ := ParseDateTime([]string{"2024-01-01T00:00:00Z", "2024-01-01T00:00:00.0000001Z", "2000-06-01T00:00:00Z"}[rng.IntN(3)])
	e.Timestamp = ts
	for _, name := range randomNames[3:] {
		if rng.IntN(4) == 0 {
			continue // missing
		}
		lit := randomLiterals[rng.IntN(len(randomLiterals))]
		f, err := ParseFilter("P eq " + lit)
		if err != nil {
			panic(err)
		}
		e.Properties = append(e.Properties, Property{name, f.Expr.(*CompareExpr).Value})
	}
	return e
}

// TestEvalRandomized checks, for random filters and entities, that the plan
// (ranges, then the residual on the stored bytes) and the whole predicate on
// the in-memory entity both agree with an independent evaluation of the AST.
// This tests the evaluator and the soundness of bounds and residual at once.
func TestEvalRandomized(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	entities := make([]*Entity, 200)
	stored := make([][]byte, len(entities))
	for i := range entities {
		entities[i] = randomEntity(rng)
		stored[i] = EncodeEntity(entities[i])
	}
	for range 3000 {
		budget := MaxComparisons
		text := randomFilter(rng, 0, &budget)
		f, err := ParseFilter(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		plan, err := CompileFilter(f)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		whole, err := compilePredicate(f.Expr, false)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		for i, e := range entities {
			want := refEval(f.Expr, e)
			if got := whole.EvalEntity(e); got != want {
				t.Fatalf("%q on %+v: EvalEntity %v, want %v", text, e, got, want)
			}
			if got, err := whole.Eval([]byte(e.PartitionKey), []byte(e.RowKey), stored[i]); err != nil || got != want {
				t.Fatalf("%q on %+v: Eval %v (%v), want %v", text, e, got, err, want)
			}
			if got, err := plan.Full.Eval([]byte(e.PartitionKey), []byte(e.RowKey), stored[i]); err != nil || got != want {
				t.Fatalf("%q on %+v: Full %v (%v), want %v", text, e, got, err, want)
			}
			in := false
			for _, r := range plan.Ranges {
				in = in || r.Contains([]byte(e.PartitionKey), []byte(e.RowKey))
			}
			got, err := plan.Match([]byte(e.PartitionKey), []byte(e.RowKey), stored[i])
			if err != nil {
				t.Fatal(err)
			}
			if in && got != want || !in && want {
				t.Fatalf("%q on %+v: in ranges %v, residual %v, want %v\nranges %s\nresidual %s",
					text, e, in, got, want, rangesString(plan.Ranges), plan.Residual)
			}
		}
	}
}

func TestRangesAreSortedAndDisjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 3000 {
		budget := MaxComparisons
		text := randomFilter(rng, 0, &budget)
		plan, err := PlanQuery(text)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range plan.Ranges {
			if r.empty() {
				t.Fatalf("%q: empty range %s", text, r)
			}
			if i > 0 && reaches(plan.Ranges[i-1].End, r.Start) {
				t.Fatalf("%q: ranges overlap or touch: %s", text, rangesString(plan.Ranges))
			}
		}
	}
}

func TestCompileTooManyComparisons(t *testing.T) {
	// An AST built by hand is checked as well as parsed text.
	var e Expr = &CompareExpr{Property: "A", Op: OpEq, Value: Int32Value(0)}
	for i := range 16 {
		e = &LogicalExpr{Left: e, Right: &CompareExpr{Property: "P" + itoa(i), Op: OpEq, Value: Int32Value(1)}}
	}
	if _, err := CompileFilter(&Filter{Expr: e}); ErrorCode(err) != CodeInvalidInput {
		t.Errorf("got %v", err)
	}
	if _, err := CompileTableFilter(&Filter{Expr: e}); ErrorCode(err) != CodeInvalidInput {
		t.Errorf("got %v", err)
	}
}
