package partition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/odata"
)

// The randomized model test: random writes, batches and queries against the
// store and against a map that implements the service's rules directly.

type modelEntity struct {
	props []odata.Property
	etag  string
}

type model map[[2]string]*modelEntity

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// apply performs op on the model as the service would and returns the
// error code it must fail with ("" for success). etag is the new ETag.
func (m model) apply(op Op, etag string) string {
	k := [2]string{op.Entity.PartitionKey, op.Entity.RowKey}
	cur := m[k]
	if op.Kind == OpInsert && cur != nil {
		return CodeEntityAlreadyExists
	}
	if op.Kind == OpUpdate || op.Kind == OpMerge || op.Kind == OpDelete || (op.Kind != OpInsert && op.IfMatch != "") {
		switch {
		case op.IfMatch == "":
			return CodeUpdateConditionNotSatisfied
		case cur == nil:
			return CodeResourceNotFound
		case op.IfMatch != "*" && op.IfMatch != cur.etag:
			return CodeUpdateConditionNotSatisfied
		}
	}
	switch {
	case op.Kind == OpDelete:
		delete(m, k)
	case (op.Kind == OpMerge || op.Kind == OpInsertOrMerge) && cur != nil:
		m[k] = &modelEntity{props: mergeProperties(cur.props, op.Entity.Properties), etag: etag}
	default:
		m[k] = &modelEntity{props: slices.Clone(op.Entity.Properties), etag: etag}
	}
	return ""
}

// A filter of the test's grammar, rendered as text and evaluated on the
// model independently of odata.
type fexpr struct {
	op          string // "and", "or", "not", "cmp", "bool"
	left, right *fexpr
	field, cmp  string
	val         any // string or int
}

var cmpOps = []string{"eq", "ne", "gt", "ge", "lt", "le"}

func genFilter(r *rand.Rand, depth int, budget *int) *fexpr {
	if depth > 0 && *budget > 1 && r.IntN(3) > 0 {
		switch r.IntN(3) {
		case 0:
			return &fexpr{op: "not", left: genFilter(r, depth-1, budget)}
		default:
			op := "and"
			if r.IntN(2) == 0 {
				op = "or"
			}
			*budget--
			return &fexpr{op: op, left: genFilter(r, depth-1, budget), right: genFilter(r, depth-1, budget)}
		}
	}
	*budget--
	switch r.IntN(6) {
	case 0, 1:
		return &fexpr{op: "cmp", field: "PartitionKey", cmp: cmpOps[r.IntN(6)], val: genPK(r) + []string{"", "", "x"}[r.IntN(3)]}
	case 2:
		return &fexpr{op: "cmp", field: "RowKey", cmp: cmpOps[r.IntN(6)], val: genRK(r)}
	case 3:
		return &fexpr{op: "cmp", field: "N", cmp: cmpOps[r.IntN(6)], val: r.IntN(60) - 5}
	case 4:
		return &fexpr{op: "cmp", field: "S", cmp: cmpOps[r.IntN(6)], val: []string{"a", "ab", "b", "c"}[r.IntN(4)]}
	}
	return &fexpr{op: "bool", field: "B"}
}

func (f *fexpr) String() string {
	switch f.op {
	case "and", "or":
		return "(" + f.left.String() + ") " + f.op + " (" + f.right.String() + ")"
	case "not":
		return "not (" + f.left.String() + ")"
	case "bool":
		return f.field
	}
	lit := fmt.Sprint(f.val)
	if s, ok := f.val.(string); ok {
		lit = "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return f.field + " " + f.cmp + " " + lit
}

func compareOrd(c int, op string) bool {
	switch op {
	case "eq":
		return c == 0
	case "ne":
		return c != 0
	case "gt":
		return c > 0
	case "ge":
		return c >= 0
	case "lt":
		return c < 0
	}
	return c <= 0
}

func (f *fexpr) eval(pk, rk string, e *modelEntity) bool {
	switch f.op {
	case "and":
		return f.left.eval(pk, rk, e) && f.right.eval(pk, rk, e)
	case "or":
		return f.left.eval(pk, rk, e) || f.right.eval(pk, rk, e)
	case "not":
		return !f.left.eval(pk, rk, e)
	}
	var prop odata.Value
	for _, p := range e.props {
		if p.Name == f.field {
			prop = p.Value
		}
	}
	switch {
	case f.op == "bool":
		return prop.Type() == odata.TypeBoolean && prop.Bool()
	case f.field == "PartitionKey":
		return compareOrd(strings.Compare(pk, f.val.(string)), f.cmp)
	case f.field == "RowKey":
		return compareOrd(strings.Compare(rk, f.val.(string)), f.cmp)
	case f.field == "N":
		if prop.Type() != odata.TypeInt32 {
			return false // missing: no comparison holds
		}
		n, v := int(prop.Int32()), f.val.(int)
		return compareOrd(cmp.Compare(n, v), f.cmp)
	default:
		if prop.Type() != odata.TypeString {
			return false
		}
		return compareOrd(strings.Compare(prop.Str(), f.val.(string)), f.cmp)
	}
}

func genPK(r *rand.Rand) string { return fmt.Sprint("p", r.IntN(8)) }
func genRK(r *rand.Rand) string { return fmt.Sprintf("r%04d", r.IntN(1000)) }

func genEntity(r *rand.Rand, pk string) *odata.Entity {
	e := ent(pk, genRK(r))
	if r.IntN(5) > 0 {
		e.Properties = append(e.Properties, odata.Property{Name: "N", Value: odata.Int32Value(int32(r.IntN(50)))})
	}
	if r.IntN(3) > 0 {
		e.Properties = append(e.Properties, odata.Property{Name: "S", Value: odata.StringValue([]string{"a", "ab", "b", "c"}[r.IntN(4)])})
	}
	if r.IntN(2) > 0 {
		e.Properties = append(e.Properties, odata.Property{Name: "B", Value: odata.BoolValue(r.IntN(2) == 0)})
	}
	if r.IntN(4) == 0 {
		e.Properties = append(e.Properties, odata.Property{Name: "Pad", Value: odata.StringValue(strings.Repeat("z", r.IntN(300)))})
	}
	return e
}

func TestModel(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 42))
	e := newEnv(t, &Options{SplitBytes: 24 << 10, SplitOpsPerSecond: 1e9})
	e.createTable("model")
	ctx := context.Background()
	m := model{}
	var etags []string // every ETag issued, for stale If-Match values
	var lastTS odata.DateTime
	ifMatch := func(k [2]string) string {
		switch r.IntN(6) {
		case 0:
			return ""
		case 1, 2:
			return "*"
		case 3:
			if len(etags) > 0 {
				return etags[r.IntN(len(etags))]
			}
		}
		if cur := m[k]; cur != nil {
			return cur.etag
		}
		return "*"
	}
	randomOp := func(pk string) Op {
		x := genEntity(r, pk)
		if r.IntN(3) > 0 {
			// Mostly act on entities that exist, so conditions are exercised.
			for k := range m {
				if k[0] == pk {
					x.RowKey = k[1]
					break
				}
			}
		}
		kind := OpKind(1 + r.IntN(6))
		op := Op{Kind: kind, Entity: x}
		if kind != OpInsert && (kind == OpUpdate || kind == OpMerge || kind == OpDelete || r.IntN(4) == 0) {
			op.IfMatch = ifMatch([2]string{pk, x.RowKey})
		}
		return op
	}
	checkTS := func(res StoredEntity) {
		if res.Timestamp <= lastTS {
			t.Fatalf("timestamp %v not after %v", res.Timestamp, lastTS)
		}
		lastTS = res.Timestamp
		etags = append(etags, res.ETag())
	}
	// Thousands of entities to begin with, so that queries walk long.
	for p := range 8 {
		for b := range 4 {
			ops := make([]Op, 100)
			for i := range ops {
				x := genEntity(r, fmt.Sprint("p", p))
				x.RowKey = fmt.Sprintf("r%04d", b*250+i*2+r.IntN(2))
				ops[i] = Op{Kind: OpInsert, Entity: x}
			}
			res, err := e.s.ExecuteBatch(ctx, acct, "model", ops)
			if err != nil {
				t.Fatal(err)
			}
			for i, op := range ops {
				m.apply(op, res[i].ETag())
				checkTS(res[i])
			}
		}
	}
	queries, pagesWalked := 0, 0
	const steps = 2000
	for step := range steps {
		switch x := r.IntN(100); {
		case x < 45:
			op := randomOp(genPK(r))
			res, err := e.s.Apply(ctx, acct, "model", op)
			want := m.apply(op, res.ETag())
			if got := ErrorCode(err); got != want || (want == "" && err != nil) {
				t.Fatalf("step %d: %v %+v If-Match %q: error %v, model says %q", step, op.Kind, op.Entity, op.IfMatch, err, want)
			}
			if err == nil && op.Kind != OpDelete {
				checkTS(res)
			}
		case x < 60:
			pk := genPK(r)
			n := 1 + r.IntN(40)
			ops := make([]Op, 0, n)
			seen := map[string]bool{}
			for range n {
				op := randomOp(pk)
				if op.Kind == OpInsert && r.IntN(2) == 0 {
					op.Entity.RowKey = fmt.Sprintf("b%05d", step*100+len(ops)) // fresh rows make batches succeed
				}
				if !seen[op.Entity.RowKey] {
					seen[op.Entity.RowKey] = true
					ops = append(ops, op)
				}
			}
			res, err := e.s.ExecuteBatch(ctx, acct, "model", ops)
			mm := m.clone()
			failAt, code := -1, ""
			for i, op := range ops {
				etag := ""
				if err == nil {
					etag = res[i].ETag()
				}
				if code = mm.apply(op, etag); code != "" {
					failAt = i
					break
				}
			}
			var be *BatchError
			switch {
			case failAt < 0 && err != nil:
				t.Fatalf("step %d: batch failed: %v; model says it succeeds", step, err)
			case failAt >= 0 && (!errors.As(err, &be) || be.Index != failAt || ErrorCode(err) != code):
				t.Fatalf("step %d: batch error %v, model says %s at %d", step, err, code, failAt)
			case failAt < 0:
				m = mm
				for i := range res {
					if ops[i].Kind != OpDelete {
						checkTS(res[i])
					}
				}
			}
		case x < 70:
			k := [2]string{genPK(r), genRK(r)}
			if r.IntN(2) == 0 {
				for kk := range m {
					k = kk
					break
				}
			}
			got, err := e.s.GetEntity(ctx, acct, "model", k[0], k[1])
			want := m[k]
			if want == nil {
				wantCode(t, "get missing", err, CodeResourceNotFound)
			} else if err != nil || got.ETag() != want.etag {
				t.Fatalf("step %d: get %v: %v %v, model etag %s", step, k, got.ETag(), err, want.etag)
			}
		case x < 85:
			budget := 1 + r.IntN(10)
			f := genFilter(r, 4, &budget)
			filter := f.String()
			if r.IntN(10) == 0 {
				f, filter = nil, ""
			}
			var want []string
			for k, v := range m {
				if f == nil || f.eval(k[0], k[1], v) {
					want = append(want, k[0]+"/"+k[1]+"/"+v.etag)
				}
			}
			slices.Sort(want)
			q := EntityQuery{Filter: filter, Top: []int{0, 3, 20, 100, 1000}[r.IntN(5)]}
			var got []string
			for {
				page, c, err := e.s.QueryEntitiesPage(ctx, acct, "model", q)
				if err != nil {
					t.Fatalf("step %d: query %q: %v", step, filter, err)
				}
				pagesWalked++
				for _, se := range page {
					got = append(got, se.PartitionKey+"/"+se.RowKey+"/"+se.ETag())
					me := m[[2]string{se.PartitionKey, se.RowKey}]
					x, err := se.Entity()
					if err != nil || me == nil || !slices.EqualFunc(x.Properties, me.props, func(a, b odata.Property) bool {
						return a.Name == b.Name && a.Value.Identical(b.Value)
					}) {
						t.Fatalf("step %d: entity %s/%s differs from the model: %v", step, se.PartitionKey, se.RowKey, err)
					}
				}
				if c.IsZero() {
					break
				}
				q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
			}
			queries++
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: query %q (top %d): got %d entities, model %d\ngot  %v\nwant %v", step, filter, q.Top, len(got), len(want), got, want)
			}
		case x < 98:
			e.s.maintain(1e9)
		default:
			e.reopen()
		}
		if step == steps/2 {
			e.reopen()
		}
	}
	// One long walk with tiny pages over everything.
	var want, got []string
	for k, v := range m {
		want = append(want, k[0]+"/"+k[1]+"/"+v.etag)
	}
	slices.Sort(want)
	q := EntityQuery{Top: 2}
	for {
		page, c, err := e.s.QueryEntitiesPage(ctx, acct, "model", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, se := range page {
			got = append(got, se.PartitionKey+"/"+se.RowKey+"/"+se.ETag())
		}
		if c.IsZero() {
			break
		}
		q.NextPartitionKey, q.NextRowKey = c.NextPartitionKey, c.NextRowKey
	}
	if !slices.Equal(got, want) {
		t.Fatalf("final walk: %d entities, model %d", len(got), len(want))
	}
	ri := checkRanges(t, e.s, "model")
	var n int64
	for _, x := range ri {
		n += x.Entities
	}
	if n != int64(len(m)) {
		t.Fatalf("ranges count %d entities, model %d", n, len(m))
	}
	t.Logf("%d entities, %d ranges, %d queries in %d pages", len(m), len(ri), queries, pagesWalked)
}
