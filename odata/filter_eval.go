package odata

import (
	"bytes"
	"math"
)

// Comparison semantics of $filter, as the service applies them (reference
// §8 and the evidence cited at each rule):
//
//   - A comparison with a property the entity does not have is false, for
//     every operator including ne: Azure drops an entity lacking Foo from
//     "Foo ne ''" (Azurite#1929; Azurite's NotEqualsNode now does the same)
//     and from both "Foo gt ''" and "Foo lt ''" (Azurite#2342).
//   - not is plain boolean negation, so "not (Foo eq 'x')" does match an
//     entity without Foo: a user relies on exactly that against Azure in
//     azure-storage-net#696, and Azurite's NotNode agrees.
//   - Values of different types never compare: the comparison is false (not
//     an error). An Int64 property needs an L literal (Azurite#755,
//     AzureStorageExplorer#1382) and a string literal never matches a number.
//   - The exception is Int32 against Double, compared as numbers: a Double
//     property 123.45 matches an Int32 literal on Azure
//     (AzureStorageExplorer#6866, where an Int64 literal did not), Microsoft's
//     own filter examples mix "Price le 200 and Price gt 3.5", and OData
//     promotes Int32 to Double.
//   - Int64 and DateTime compare as numbers (DateTime at full 100 ns
//     precision, Azurite#2069), doubles by IEEE rules (NaN compares false,
//     except ne which is true), booleans with false < true, Guids by their
//     canonical text (which is .NET's Guid order), binary bytewise.
//   - Strings compare ordinally by UTF-8 bytes. .NET orders by UTF-16 code
//     units, which differs only between supplementary characters (U+10000
//     and up) and U+E000–U+FFFF; UTF-8 byte order is the order keys are
//     stored and returned in, and bounds and residual must agree with it.

// compareRaw applies op to a property value and a literal.
func compareRaw(p rawValue, op CompareOp, l rawValue) bool {
	var c int
	switch {
	case p.t == l.t:
		switch p.t {
		case TypeString, TypeBinary, TypeGuid:
			c = bytes.Compare(p.data, l.data)
		case TypeInt32, TypeInt64, TypeDateTime:
			a, b := int64(p.n), int64(l.n)
			c = cmpOrdered(a, b)
		case TypeBoolean:
			c = cmpOrdered(p.n, l.n)
		case TypeDouble:
			return compareFloat(math.Float64frombits(p.n), op, math.Float64frombits(l.n))
		default:
			return false
		}
	case (p.t == TypeInt32 && l.t == TypeDouble) || (p.t == TypeDouble && l.t == TypeInt32):
		return compareFloat(p.float(), op, l.float())
	default:
		return false
	}
	return opHolds(op, c)
}

func cmpOrdered[T int64 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareFloat(a float64, op CompareOp, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return op == OpNe
	}
	c := 0
	if a < b {
		c = -1
	} else if a > b {
		c = 1
	}
	return opHolds(op, c)
}

func opHolds(op CompareOp, c int) bool {
	switch op {
	case OpEq:
		return c == 0
	case OpNe:
		return c != 0
	case OpGt:
		return c > 0
	case OpGe:
		return c >= 0
	case OpLt:
		return c < 0
	case OpLe:
		return c <= 0
	}
	return false
}

func rawOf(v Value) rawValue {
	r := rawValue{t: v.t, n: v.n}
	if v.t == TypeString || v.t == TypeBinary || v.t == TypeGuid {
		r.data = []byte(v.s)
	}
	return r
}

// compareValues applies op to two in-memory values under the same rules.
func compareValues(a Value, op CompareOp, b Value) bool {
	return compareRaw(rawOf(a), op, rawOf(b))
}

// Compare reports whether "a op b" holds under $filter's rules: false when
// the types differ (Int32 against Double excepted) or either value is
// absent.
func Compare(a Value, op CompareOp, b Value) bool {
	if a.t == 0 || b.t == 0 {
		return false
	}
	return compareValues(a, op, b)
}

type nodeKind uint8

const (
	nAnd nodeKind = iota + 1
	nOr
	nNot
	nCmp
	nBoolProp
	nConst
)

// Fields a comparison reads, besides the custom-property slots 0..n-1.
const (
	fieldPK        = -1 // PartitionKey, or TableName for a tables query
	fieldRK        = -2
	fieldTimestamp = -3
	fieldNone      = -4 // a property that can never be present
)

// maxSlots is how many distinct custom properties a predicate can read: each
// needs a comparison, and a filter has at most 15.
const maxSlots = MaxComparisons + 1

type pnode struct {
	kind        nodeKind
	op          CompareOp
	val         bool
	field       int32
	left, right int32
	lit         rawValue
}

// Predicate is a compiled filter expression, evaluated on an entity's keys
// and stored bytes without decoding them or allocating.
type Predicate struct {
	nodes      []pnode
	root       int32
	names      []string // custom property read by each slot
	readsValue bool     // Timestamp or a custom property is read
	text       string
}

// String returns the predicate as canonical $filter text.
func (p *Predicate) String() string {
	if p == nil {
		return ""
	}
	return p.text
}

// evalCtx holds what one evaluation reads; it lives on the stack.
type evalCtx struct {
	pk, rk []byte
	ts     DateTime
	slots  [maxSlots]rawValue
}

func (c *evalCtx) field(f int32) rawValue {
	switch f {
	case fieldPK:
		return rawValue{t: TypeString, data: c.pk}
	case fieldRK:
		return rawValue{t: TypeString, data: c.rk}
	case fieldTimestamp:
		return rawValue{t: TypeDateTime, n: uint64(c.ts)}
	case fieldNone:
		return rawValue{}
	}
	return c.slots[f]
}

// Eval evaluates the predicate on an entity given by its keys and its stored
// value. A nil Predicate matches everything. The error is a corrupt stored
// value, reported only if the bytes the predicate needed were unreadable.
func (p *Predicate) Eval(pk, rk, stored []byte) (bool, error) {
	if p == nil {
		return true, nil
	}
	var c evalCtx
	c.pk, c.rk = pk, rk
	if p.readsValue {
		r, err := openEncoded(stored)
		if err != nil {
			return false, err
		}
		c.ts = r.ts
		want := len(p.names)
		for found := 0; found < want; {
			name, v, ok := r.next()
			if !ok {
				if r.err != nil {
					return false, r.err
				}
				break
			}
			for i, n := range p.names {
				if c.slots[i].t == 0 && len(n) == len(name) && n == string(name) {
					c.slots[i] = v
					found++
					break
				}
			}
		}
	}
	return p.eval(p.root, &c), nil
}

// EvalEntity evaluates the predicate on an in-memory entity. It allocates;
// the hot path is Eval on stored bytes.
func (p *Predicate) EvalEntity(e *Entity) bool {
	if p == nil {
		return true
	}
	var c evalCtx
	c.pk, c.rk, c.ts = []byte(e.PartitionKey), []byte(e.RowKey), e.Timestamp
	for i, n := range p.names {
		if v, ok := e.Get(n); ok {
			c.slots[i] = rawOf(v)
		}
	}
	return p.eval(p.root, &c)
}

// EvalTable evaluates a tables-query predicate on a table name.
func (p *Predicate) EvalTable(name string) bool {
	if p == nil {
		return true
	}
	var c evalCtx
	c.pk = []byte(name)
	return p.eval(p.root, &c)
}

func (p *Predicate) eval(i int32, c *evalCtx) bool {
	n := &p.nodes[i]
	switch n.kind {
	case nAnd:
		return p.eval(n.left, c) && p.eval(n.right, c)
	case nOr:
		return p.eval(n.left, c) || p.eval(n.right, c)
	case nNot:
		return !p.eval(n.left, c)
	case nConst:
		return n.val
	case nBoolProp:
		v := c.field(n.field)
		return v.t == TypeBoolean && v.n != 0
	case nCmp:
		v := c.field(n.field)
		if v.t == 0 {
			return false
		}
		return compareRaw(v, n.op, n.lit)
	}
	return false
}

// compilePredicate flattens e into a Predicate. tables selects the Query
// Tables context, where TableName is the only property.
func compilePredicate(e Expr, tables bool) (*Predicate, error) {
	p := &Predicate{text: e.String()}
	root, err := p.emit(e, tables)
	if err != nil {
		return nil, err
	}
	p.root = root
	return p, nil
}

func (p *Predicate) fieldOf(name string, tables bool) (int32, error) {
	if tables {
		if name == TableNameName {
			return fieldPK, nil
		}
		return fieldNone, nil
	}
	switch name {
	case PartitionKeyName:
		return fieldPK, nil
	case RowKeyName:
		return fieldRK, nil
	case TimestampName:
		p.readsValue = true
		return fieldTimestamp, nil
	}
	p.readsValue = true
	for i, n := range p.names {
		if n == name {
			return int32(i), nil
		}
	}
	if len(p.names) == maxSlots {
		return 0, queryError(-1, "more than %d comparisons.", MaxComparisons)
	}
	p.names = append(p.names, name)
	return int32(len(p.names) - 1), nil
}

func (p *Predicate) emit(e Expr, tables bool) (int32, error) {
	var n pnode
	switch x := e.(type) {
	case *LogicalExpr:
		l, err := p.emit(x.Left, tables)
		if err != nil {
			return 0, err
		}
		r, err := p.emit(x.Right, tables)
		if err != nil {
			return 0, err
		}
		n = pnode{kind: nAnd, left: l, right: r}
		if x.Or {
			n.kind = nOr
		}
	case *NotExpr:
		l, err := p.emit(x.X, tables)
		if err != nil {
			return 0, err
		}
		n = pnode{kind: nNot, left: l}
	case *ConstExpr:
		n = pnode{kind: nConst, val: x.Value}
	case *BoolPropertyExpr:
		f, err := p.fieldOf(x.Property, tables)
		if err != nil {
			return 0, err
		}
		n = pnode{kind: nBoolProp, field: f}
	case *CompareExpr:
		if x.Value.t == 0 {
			return 0, queryError(x.PropPos, "comparison of %s has no literal.", x.Property)
		}
		f, err := p.fieldOf(x.Property, tables)
		if err != nil {
			return 0, err
		}
		n = pnode{kind: nCmp, op: x.Op, field: f, lit: rawOf(x.Value)}
	default:
		return 0, queryError(-1, "unknown filter node.")
	}
	p.nodes = append(p.nodes, n)
	return int32(len(p.nodes) - 1), nil
}
