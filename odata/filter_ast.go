package odata

// CompareOp is a $filter comparison operator.
type CompareOp uint8

// The comparison operators of $filter.
const (
	OpEq CompareOp = iota + 1
	OpNe
	OpGt
	OpGe
	OpLt
	OpLe
)

var opNames = [...]string{OpEq: "eq", OpNe: "ne", OpGt: "gt", OpGe: "ge", OpLt: "lt", OpLe: "le"}

func (op CompareOp) String() string {
	if op >= OpEq && op <= OpLe {
		return opNames[op]
	}
	return "?"
}

// swap returns the operator that keeps the meaning when the operands trade
// places: 'a' lt Prop is Prop gt 'a'.
func (op CompareOp) swap() CompareOp {
	switch op {
	case OpGt:
		return OpLt
	case OpGe:
		return OpLe
	case OpLt:
		return OpGt
	case OpLe:
		return OpGe
	}
	return op
}

// negate returns the complement operator, valid only where both operands are
// always present and comparable (the keys with a string literal).
func (op CompareOp) negate() CompareOp {
	switch op {
	case OpEq:
		return OpNe
	case OpNe:
		return OpEq
	case OpGt:
		return OpLe
	case OpGe:
		return OpLt
	case OpLt:
		return OpGe
	}
	return OpGt
}

// Expr is a node of a parsed $filter: *LogicalExpr, *NotExpr, *CompareExpr,
// *BoolPropertyExpr or *ConstExpr.
type Expr interface {
	// Pos is the byte offset in the filter text where the node starts.
	Pos() int
	// String renders the node as fully parenthesized $filter text that
	// parses back to the same tree.
	String() string
	isExpr()
}

// LogicalExpr is "Left and Right" or "Left or Right".
type LogicalExpr struct {
	Or          bool // false: and
	Left, Right Expr
}

// NotExpr is "not X".
type NotExpr struct {
	X      Expr
	NotPos int
}

// CompareExpr compares a property with a literal. The parser puts the
// property on the left whichever side it was written on ('a' lt P becomes
// P gt 'a').
type CompareExpr struct {
	Property string
	Op       CompareOp
	Value    Value
	PropPos  int
}

// BoolPropertyExpr is a bare property used as a condition ("$filter=Active"):
// true when the property is a Boolean that is true.
type BoolPropertyExpr struct {
	Property string
	PropPos  int
}

// ConstExpr is a bare true or false.
type ConstExpr struct {
	Value    bool
	ValuePos int
}

func (e *LogicalExpr) Pos() int      { return e.Left.Pos() }
func (e *NotExpr) Pos() int          { return e.NotPos }
func (e *CompareExpr) Pos() int      { return e.PropPos }
func (e *BoolPropertyExpr) Pos() int { return e.PropPos }
func (e *ConstExpr) Pos() int        { return e.ValuePos }

func (*LogicalExpr) isExpr()      {}
func (*NotExpr) isExpr()          {}
func (*CompareExpr) isExpr()      {}
func (*BoolPropertyExpr) isExpr() {}
func (*ConstExpr) isExpr()        {}

func (e *LogicalExpr) String() string {
	op := " and "
	if e.Or {
		op = " or "
	}
	return "(" + e.Left.String() + op + e.Right.String() + ")"
}

func (e *NotExpr) String() string { return "(not " + e.X.String() + ")" }
func (e *CompareExpr) String() string {
	return e.Property + " " + e.Op.String() + " " + e.Value.String()
}
func (e *BoolPropertyExpr) String() string { return e.Property }

func (e *ConstExpr) String() string {
	if e.Value {
		return "true"
	}
	return "false"
}

// Filter is a parsed $filter. A nil Expr is the empty filter, which matches
// every entity.
type Filter struct {
	Expr Expr
	// Comparisons counts the discrete comparisons (bare boolean properties
	// included) against the service's limit of 15.
	Comparisons int
}

// String renders the filter as canonical text ("" for the empty filter).
func (f *Filter) String() string {
	if f == nil || f.Expr == nil {
		return ""
	}
	return f.Expr.String()
}

// conjuncts flattens the top-level ands of e.
func conjuncts(e Expr, out []Expr) []Expr {
	if l, ok := e.(*LogicalExpr); ok && !l.Or {
		out = conjuncts(l.Left, out)
		return conjuncts(l.Right, out)
	}
	return append(out, e)
}
