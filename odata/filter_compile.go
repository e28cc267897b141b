package odata

// Plan is a compiled entity query: the key ranges to scan and the predicate
// the entities found there must still pass.
//
// Ranges over-approximate the filter: every matching entity lies in one of
// them, and they are sorted and disjoint. No ranges means that no entity can
// match (e.g. PartitionKey eq 'a' and PartitionKey eq 'b'); a single full
// range means a table scan. Residual is the original filter minus the
// top-level conjuncts that the ranges already guarantee, so a scan of the
// ranges filtered by Residual returns exactly the filter's entities; nil
// means every entity in the ranges matches.
//
// How bounds are found: comparisons of PartitionKey with a string literal
// give exact ranges; RowKey comparisons narrow them where they are and-ed
// with them (inside a single partition, and at the first and last partition
// of a wider range); or gives the union of its sides' ranges, so
// "PartitionKey eq 'a' or PartitionKey eq 'c'" scans two partitions, not
// the hull between them; and an and over an or that constrains RowKey is
// distributed, so "PartitionKey eq 'p' and (RowKey eq 'a' or RowKey eq 'b')"
// becomes two point reads. not is pushed down to the key comparisons, which
// are never missing and so negate exactly.
//
// Residual is only sufficient within Ranges. Full is the whole filter,
// sufficient on its own, for a caller that scans anything wider (nil for the
// empty filter).
type Plan struct {
	Ranges   []KeyRange // shared between plans: never modify in place
	Residual *Predicate
	Full     *Predicate
}

// Match reports whether an entity found in the plan's ranges passes the
// residual predicate (see Predicate.Eval).
func (p *Plan) Match(pk, rk, stored []byte) (bool, error) { return p.Residual.Eval(pk, rk, stored) }

// Empty reports whether no entity can match.
func (p *Plan) Empty() bool { return len(p.Ranges) == 0 }

// PlanQuery parses and compiles an entity $filter.
func PlanQuery(filter string) (*Plan, error) {
	f, err := ParseFilter(filter)
	if err != nil {
		return nil, err
	}
	return CompileFilter(f)
}

// CompileFilter compiles a parsed entity filter into a Plan.
func CompileFilter(f *Filter) (*Plan, error) {
	if f == nil || f.Expr == nil {
		return &Plan{Ranges: []KeyRange{FullRange}}, nil
	}
	if n := countComparisons(f.Expr); n > MaxComparisons {
		return nil, queryError(f.Expr.Pos(), "more than %d comparisons.", MaxComparisons)
	}
	full, err := compilePredicate(f.Expr, false)
	if err != nil {
		return nil, err
	}
	cols := keyCols{pk: PartitionKeyName, rk: RowKeyName}
	ranges, residual := cols.plan(f.Expr)
	plan := &Plan{Ranges: ranges, Full: full}
	switch {
	case residual == f.Expr:
		plan.Residual = full
	case residual != nil && len(ranges) > 0:
		if plan.Residual, err = compilePredicate(residual, false); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// CompilePredicate compiles a whole entity filter into one predicate, with
// no key ranges taken out: for callers that test entities they already hold
// (and for checking a Plan against it). The empty filter gives nil, which
// matches everything.
func CompilePredicate(f *Filter) (*Predicate, error) {
	if f == nil || f.Expr == nil {
		return nil, nil
	}
	if n := countComparisons(f.Expr); n > MaxComparisons {
		return nil, queryError(f.Expr.Pos(), "more than %d comparisons.", MaxComparisons)
	}
	return compilePredicate(f.Expr, false)
}

// NameRange is a range of table names, for Query Tables: names between
// Lower and Upper, each bound present only when HasLower / HasUpper.
type NameRange struct {
	Lower, Upper                   string
	HasLower, HasUpper             bool
	LowerInclusive, UpperInclusive bool
}

// Contains reports whether name lies in r.
func (r NameRange) Contains(name string) bool {
	if r.HasLower && (name < r.Lower || (name == r.Lower && !r.LowerInclusive)) {
		return false
	}
	if r.HasUpper && (name > r.Upper || (name == r.Upper && !r.UpperInclusive)) {
		return false
	}
	return true
}

// TablePlan is a compiled Query Tables filter, over the one property a
// table has, TableName. Like Plan, Ranges bound the names and Residual is
// what remains to check; comparisons are ordinal on the name as stored.
type TablePlan struct {
	Ranges   []NameRange
	Residual *Predicate
}

// Match reports whether a table in the plan's ranges passes the residual.
func (p *TablePlan) Match(name string) bool { return p.Residual.EvalTable(name) }

// PlanTableQuery parses and compiles a Query Tables $filter.
func PlanTableQuery(filter string) (*TablePlan, error) {
	f, err := ParseFilter(filter)
	if err != nil {
		return nil, err
	}
	return CompileTableFilter(f)
}

// CompileTableFilter compiles a parsed Query Tables filter.
func CompileTableFilter(f *Filter) (*TablePlan, error) {
	if f == nil || f.Expr == nil {
		return &TablePlan{Ranges: []NameRange{{}}}, nil
	}
	if n := countComparisons(f.Expr); n > MaxComparisons {
		return nil, queryError(f.Expr.Pos(), "more than %d comparisons.", MaxComparisons)
	}
	cols := keyCols{pk: TableNameName}
	ranges, residual := cols.plan(f.Expr)
	plan := &TablePlan{Ranges: make([]NameRange, 0, len(ranges))}
	for _, r := range ranges {
		var n NameRange
		switch r.Start.Kind {
		case BeforeKey:
			n.Lower, n.HasLower, n.LowerInclusive = r.Start.PartitionKey, true, true
		case AfterPartition:
			n.Lower, n.HasLower = r.Start.PartitionKey, true
		}
		switch r.End.Kind {
		case BeforeKey:
			n.Upper, n.HasUpper = r.End.PartitionKey, true
		case AfterPartition:
			n.Upper, n.HasUpper, n.UpperInclusive = r.End.PartitionKey, true, true
		}
		plan.Ranges = append(plan.Ranges, n)
	}
	if residual != nil && len(ranges) > 0 {
		pred, err := compilePredicate(residual, true)
		if err != nil {
			return nil, err
		}
		plan.Residual = pred
	}
	return plan, nil
}

func countComparisons(e Expr) int {
	switch x := e.(type) {
	case *LogicalExpr:
		return countComparisons(x.Left) + countComparisons(x.Right)
	case *NotExpr:
		return countComparisons(x.X)
	case *CompareExpr, *BoolPropertyExpr:
		return 1
	}
	return 0
}

// keyCols names the clustered-index columns: PartitionKey and RowKey for
// entities; TableName alone (rk == "") for tables.
type keyCols struct{ pk, rk string }

// plan computes the ranges of e and the residual expression.
func (k keyCols) plan(e Expr) ([]KeyRange, Expr) {
	ranges, _ := k.ranges(toNNF(e, false))
	if len(ranges) == 0 {
		return ranges, nil
	}
	var kept []Expr
	for _, c := range conjuncts(e, nil) {
		if !k.guaranteed(c, ranges) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return ranges, nil
	}
	residual := kept[0]
	for _, c := range kept[1:] {
		residual = &LogicalExpr{Left: residual, Right: c}
	}
	return ranges, residual
}

// guaranteed reports whether every key in ranges satisfies conjunct c, so
// that the residual need not test it. Ranges inside one partition are
// checked with that partition pinned, which makes RowKey conditions exact.
func (k keyCols) guaranteed(c Expr, ranges []KeyRange) bool {
	n := toNNF(c, false)
	if set, exact := k.ranges(n); exact && setContains(set, ranges) {
		return true
	}
	if k.rk == "" {
		return false
	}
	for _, r := range ranges {
		p, ok := r.Partition()
		if !ok {
			return false
		}
		pin := nnf{leaf: &CompareExpr{Property: k.pk, Op: OpEq, Value: StringValue(p)}}
		set, exact := k.conjunction(flattenAnd([]nnf{pin, n}))
		if !exact || !setContains(set, []KeyRange{r}) {
			return false
		}
	}
	return true
}

// nnf is a filter in negation normal form, for range analysis only: nots
// sit on leaves.
type nnf struct {
	and, or bool
	kids    []nnf
	leaf    Expr // *CompareExpr, *BoolPropertyExpr or *ConstExpr
	neg     bool
}

func toNNF(e Expr, neg bool) nnf {
	switch x := e.(type) {
	case *NotExpr:
		return toNNF(x.X, !neg)
	case *LogicalExpr:
		isOr := x.Or != neg // De Morgan
		n := nnf{and: !isOr, or: isOr}
		for _, side := range [2]Expr{x.Left, x.Right} {
			kid := toNNF(side, neg)
			if kid.or == n.or && kid.and == n.and {
				n.kids = append(n.kids, kid.kids...)
			} else {
				n.kids = append(n.kids, kid)
			}
		}
		return n
	}
	return nnf{leaf: e, neg: neg}
}

var fullSet = []KeyRange{FullRange}

// ranges returns ranges covering every key that can satisfy n, and whether
// they are exact (every key in them satisfies n).
func (k keyCols) ranges(n nnf) ([]KeyRange, bool) {
	switch {
	case n.or:
		var out []KeyRange
		exact := true
		for _, kid := range n.kids {
			s, ex := k.ranges(kid)
			out = unionSets(out, s)
			exact = exact && ex
		}
		return out, exact
	case n.and:
		return k.conjunction(n.kids)
	}
	switch x := n.leaf.(type) {
	case *ConstExpr:
		if x.Value != n.neg {
			return fullSet, true
		}
		return nil, true
	case *CompareExpr:
		if x.Property != k.pk && (k.rk == "" || x.Property != k.rk) {
			return fullSet, false
		}
		if x.Value.t != TypeString {
			// A key is always a string: the comparison is always false,
			// so its negation is always true.
			if n.neg {
				return fullSet, true
			}
			return nil, true
		}
		if x.Property == k.rk {
			return fullSet, false // narrowed where and-ed with a partition
		}
		op := x.Op
		if n.neg {
			op = op.negate()
		}
		return pkRanges(op, x.Value.s), true
	}
	return fullSet, false
}

// rowKeyLeaf returns the effective operator and literal of a RowKey
// comparison with a string literal.
func (k keyCols) rowKeyLeaf(n nnf) (CompareOp, string, bool) {
	if n.or || n.and || k.rk == "" {
		return 0, "", false
	}
	x, ok := n.leaf.(*CompareExpr)
	if !ok || x.Property != k.rk || x.Value.t != TypeString {
		return 0, "", false
	}
	op := x.Op
	if n.neg {
		op = op.negate()
	}
	return op, x.Value.s, true
}

// maxDistribute bounds how many disjuncts an and over ors may expand into.
const maxDistribute = 64

func (k keyCols) conjunction(kids []nnf) ([]KeyRange, bool) {
	// Distribute over the first or that constrains RowKey, so that each of
	// its sides meets the partition bounds of the other conjuncts.
	for i, kid := range kids {
		if !kid.or || len(kid.kids) > maxDistribute || !k.mentionsRowKey(kid) {
			continue
		}
		rest := make([]nnf, 0, len(kids))
		rest = append(rest, kids[:i]...)
		rest = append(rest, kids[i+1:]...)
		var out []KeyRange
		exact := true
		for _, d := range kid.kids {
			branch := append(append(make([]nnf, 0, len(rest)+1), rest...), d)
			s, ex := k.conjunction(flattenAnd(branch))
			out = unionSets(out, s)
			exact = exact && ex
			if len(out) > maxDistribute {
				break // enough precision; the rest would only cost time
			}
		}
		if len(out) <= maxDistribute {
			return out, exact
		}
		break
	}
	set, exact := fullSet, true
	var rk rkBound
	for _, kid := range kids {
		if op, v, ok := k.rowKeyLeaf(kid); ok {
			if op == OpNe {
				exact = false // no interval; left to the residual
			} else {
				rk.add(op, v)
			}
			continue
		}
		s, ex := k.ranges(kid)
		set = intersectSets(set, s)
		exact = exact && ex
		if len(set) == 0 {
			return nil, exact
		}
	}
	if rk.hasLo || rk.hasHi {
		// Within one partition the bound is exact; across several it only
		// trims the first and last partition.
		for _, r := range set {
			if _, ok := r.Partition(); !ok {
				exact = false
			}
		}
		set = rk.tighten(set)
	}
	return set, exact
}

func flattenAnd(kids []nnf) []nnf {
	var out []nnf
	for _, kid := range kids {
		if kid.and {
			out = append(out, flattenAnd(kid.kids)...)
		} else {
			out = append(out, kid)
		}
	}
	return out
}

func (k keyCols) mentionsRowKey(n nnf) bool {
	if n.and || n.or {
		for _, kid := range n.kids {
			if k.mentionsRowKey(kid) {
				return true
			}
		}
		return false
	}
	_, _, ok := k.rowKeyLeaf(n)
	return ok
}

// pkRanges is the exact set of keys whose partition key satisfies "op v".
func pkRanges(op CompareOp, v string) []KeyRange {
	before := Position{Kind: BeforeKey, PartitionKey: v}
	after := Position{Kind: AfterPartition, PartitionKey: v}
	switch op {
	case OpEq:
		return []KeyRange{{Start: before, End: after}}
	case OpNe:
		return []KeyRange{{End: before}, {Start: after}}
	case OpGt:
		return []KeyRange{{Start: after}}
	case OpGe:
		return []KeyRange{{Start: before}}
	case OpLt:
		return []KeyRange{{End: before}}
	case OpLe:
		return []KeyRange{{End: after}}
	}
	return fullSet
}

// rkBound is the intersection of RowKey comparisons: an interval of row
// keys, applied within whichever partition a range starts or ends in.
type rkBound struct {
	lo, hi         string
	hasLo, hasHi   bool
	loIncl, hiIncl bool
}

func (b *rkBound) add(op CompareOp, v string) {
	switch op {
	case OpEq:
		b.addLo(v, true)
		b.addHi(v, true)
	case OpGt:
		b.addLo(v, false)
	case OpGe:
		b.addLo(v, true)
	case OpLt:
		b.addHi(v, false)
	case OpLe:
		b.addHi(v, true)
	}
}

func (b *rkBound) addLo(v string, incl bool) {
	if !b.hasLo || v > b.lo || (v == b.lo && !incl) {
		b.lo, b.loIncl, b.hasLo = v, incl, true
	}
}

func (b *rkBound) addHi(v string, incl bool) {
	if !b.hasHi || v < b.hi || (v == b.hi && !incl) {
		b.hi, b.hiIncl, b.hasHi = v, incl, true
	}
}

// rangeAt is the bound as a key range within partition p.
func (b *rkBound) rangeAt(p string) KeyRange {
	r := KeyRange{
		Start: Position{Kind: BeforeKey, PartitionKey: p},
		End:   Position{Kind: AfterPartition, PartitionKey: p},
	}
	if b.hasLo {
		r.Start.RowKey = b.lo
		if !b.loIncl {
			r.Start.Kind = AfterKey
		}
	}
	if b.hasHi {
		r.End = Position{Kind: BeforeKey, PartitionKey: p, RowKey: b.hi}
		if b.hiIncl {
			r.End.Kind = AfterKey
		}
	}
	return r
}

// tighten narrows each range by the RowKey bound at its first and last
// partition. Keys cut off there fail the bound: within a partition, row
// keys below the bound sort first and those above it last.
func (b *rkBound) tighten(set []KeyRange) []KeyRange {
	out := make([]KeyRange, 0, len(set))
	for _, r := range set {
		if r.Start.Kind != Unbounded {
			if s := b.rangeAt(r.Start.PartitionKey).Start; cmpStarts(s, r.Start) > 0 {
				r.Start = s
			}
		}
		if r.End.Kind != Unbounded {
			if e := b.rangeAt(r.End.PartitionKey).End; cmpEnds(e, r.End) < 0 {
				r.End = e
			}
		}
		if !r.empty() {
			out = append(out, r)
		}
	}
	return normalize(out)
}
