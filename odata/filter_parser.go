package odata

// MaxComparisons is the service's limit on discrete comparisons in one
// $filter (Querying tables and entities).
const MaxComparisons = 15

// maxFilterDepth bounds nesting (parentheses and nots) so that a hostile
// filter cannot exhaust the stack of the recursive-descent parser.
const maxFilterDepth = 100

// maxFilterTerms bounds the operands of and/or chains. Comparisons are
// limited to 15, but bare true/false are not comparisons, and a long chain
// of them would otherwise build a tree deep enough to make every recursive
// walk over it expensive.
const maxFilterTerms = 100

// ParseFilter parses a $filter expression into its AST.
//
// The grammar is what the service accepts: comparisons (eq ne gt ge lt le)
// of a property with a literal, the property on either side; and, or and not
// with the usual precedence (not binds tightest, then and, then or) and
// parentheses; a bare property as a boolean test; bare true or false.
// Literals are 'string' (a doubled quote escapes one), Int32 (123), Int64 (123L),
// Double (1.5, 2e10, 2.0D, NaN, INF, -INF), true/false, datetime'…',
// guid'…', X'hex' and binary'hex'. Keywords are case-insensitive.
//
// Everything else is an *Error with code InvalidInput whose Pos and message
// point at the offending token: arithmetic, functions, null, comparing two
// properties, an expression that is not boolean (e.g. "1"), an Int32
// literal out of range, or more than 15 comparisons. An empty or blank
// filter parses to a Filter with a nil Expr, which matches everything.
func ParseFilter(src string) (*Filter, error) {
	p := &parser{lx: lexer{src: src}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	if p.tok.kind == tokEOF {
		return &Filter{}, nil
	}
	e, err := p.parseOr(0)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.unexpected("and, or or the end of the filter")
	}
	return &Filter{Expr: e, Comparisons: p.comparisons}, nil
}

type parser struct {
	lx          lexer
	tok         token
	comparisons int
	terms       int
}

func (p *parser) advance() error {
	t, err := p.lx.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

func (p *parser) unexpected(want string) error {
	t := p.tok
	if t.kind == tokEOF {
		return queryError(t.pos, "unexpected end of filter at position %d; expected %s.", t.pos, want)
	}
	what := p.lx.describe(t.pos, t.end)
	if t.kind == tokIdent && t.keyword == kwArith {
		return queryError(t.pos, "unsupported operator %s at position %d; arithmetic is not supported.", what, t.pos)
	}
	return queryError(t.pos, "unexpected %s at position %d; expected %s.", what, t.pos, want)
}

func (p *parser) isKeyword(k keyword) bool { return p.tok.kind == tokIdent && p.tok.keyword == k }

func (p *parser) parseOr(depth int) (Expr, error) {
	left, err := p.parseAnd(depth)
	if err != nil {
		return nil, err
	}
	for p.isKeyword(kwOr) {
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.parseAnd(depth)
		if err != nil {
			return nil, err
		}
		left = &LogicalExpr{Or: true, Left: left, Right: right}
	}
	return left, nil
}

func (p *parser) parseAnd(depth int) (Expr, error) {
	left, err := p.parseUnary(depth)
	if err != nil {
		return nil, err
	}
	for p.isKeyword(kwAnd) {
		if err := p.advance(); err != nil {
			return nil, err
		}
		right, err := p.parseUnary(depth)
		if err != nil {
			return nil, err
		}
		left = &LogicalExpr{Left: left, Right: right}
	}
	return left, nil
}

func (p *parser) parseUnary(depth int) (Expr, error) {
	if depth >= maxFilterDepth {
		return nil, queryError(p.tok.pos, "filter nested too deeply at position %d.", p.tok.pos)
	}
	if p.isKeyword(kwNot) {
		pos := p.tok.pos
		if err := p.advance(); err != nil {
			return nil, err
		}
		x, err := p.parseUnary(depth + 1)
		if err != nil {
			return nil, err
		}
		return &NotExpr{X: x, NotPos: pos}, nil
	}
	if p.tok.kind == tokLParen {
		if err := p.advance(); err != nil {
			return nil, err
		}
		e, err := p.parseOr(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.unexpected("')'")
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		return e, nil
	}
	return p.parseComparison()
}

// operand is one side of a comparison.
type operand struct {
	tok   token
	isLit bool
}

func (p *parser) parseOperand() (operand, error) {
	t := p.tok
	switch {
	case t.kind == tokLiteral:
		if t.isNull {
			// The service rejects "eq null" outright (Azurite#2471 shows
			// InvalidInput from Azure).
			return operand{}, queryError(t.pos, "null literal at position %d is not supported.", t.pos)
		}
	case t.kind == tokIdent && t.keyword == kwNone:
	default:
		return operand{}, p.unexpected("a property name or a literal")
	}
	if err := p.advance(); err != nil {
		return operand{}, err
	}
	if t.kind == tokIdent && p.tok.kind == tokLParen {
		return operand{}, queryError(t.pos, "function %s at position %d is not supported.", p.lx.describe(t.pos, t.end), t.pos)
	}
	return operand{tok: t, isLit: t.kind == tokLiteral}, nil
}

func compareOp(k keyword) CompareOp {
	switch k {
	case kwEq:
		return OpEq
	case kwNe:
		return OpNe
	case kwGt:
		return OpGt
	case kwGe:
		return OpGe
	case kwLt:
		return OpLt
	case kwLe:
		return OpLe
	}
	return 0
}

func (p *parser) countComparison(pos int) error {
	p.comparisons++
	if p.comparisons > MaxComparisons {
		return queryError(pos, "more than %d comparisons; the 16th is at position %d.", MaxComparisons, pos)
	}
	return nil
}

func (p *parser) parseComparison() (Expr, error) {
	p.terms++
	if p.terms > maxFilterTerms {
		return nil, queryError(p.tok.pos, "filter has more than %d terms at position %d.", maxFilterTerms, p.tok.pos)
	}
	left, err := p.parseOperand()
	if err != nil {
		return nil, err
	}
	op := compareOp(p.tok.keyword)
	if p.tok.kind != tokIdent || op == 0 {
		// A lone operand must be a boolean: a property tested for true, or
		// the literal true or false.
		if left.isLit {
			if left.tok.val.Type() != TypeBoolean {
				return nil, queryError(left.tok.pos, "%s at position %d is not a boolean expression.", p.lx.describe(left.tok.pos, left.tok.end), left.tok.pos)
			}
			return &ConstExpr{Value: left.tok.val.Bool(), ValuePos: left.tok.pos}, nil
		}
		switch left.tok.text {
		case PartitionKeyName, RowKeyName, TimestampName, TableNameName:
			return nil, queryError(left.tok.pos, "%s at position %d is not a boolean expression.", left.tok.text, left.tok.pos)
		}
		if err := p.countComparison(left.tok.pos); err != nil {
			return nil, err
		}
		return &BoolPropertyExpr{Property: left.tok.text, PropPos: left.tok.pos}, nil
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	right, err := p.parseOperand()
	if err != nil {
		return nil, err
	}
	if err := p.countComparison(left.tok.pos); err != nil {
		return nil, err
	}
	switch {
	case !left.isLit && !right.isLit:
		return nil, queryError(right.tok.pos, "comparing property %s with property %s at position %d is not supported; compare with a literal.", left.tok.text, right.tok.text, right.tok.pos)
	case left.isLit && right.isLit:
		// Two literals fold to a constant under the same rules as property
		// values; the service has no use for them but they are harmless.
		return &ConstExpr{Value: compareValues(left.tok.val, op, right.tok.val), ValuePos: left.tok.pos}, nil
	case left.isLit:
		return &CompareExpr{Property: right.tok.text, Op: op.swap(), Value: left.tok.val, PropPos: right.tok.pos}, nil
	}
	return &CompareExpr{Property: left.tok.text, Op: op, Value: right.tok.val, PropPos: left.tok.pos}, nil
}
