package odata

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokenKind uint8

const (
	tokEOF tokenKind = iota
	tokLParen
	tokRParen
	tokIdent   // a property name (or a keyword; see token.keyword)
	tokLiteral // any literal; the value is in token.val
)

// keyword identifies the reserved words of $filter. They are matched without
// regard to case (the service takes TRUE and And; Azurite does the same).
type keyword uint8

const (
	kwNone keyword = iota
	kwAnd
	kwOr
	kwNot
	kwEq
	kwNe
	kwGt
	kwGe
	kwLt
	kwLe
	kwNull
	kwArith // add sub mul div mod: OData arithmetic, which the service rejects
)

type token struct {
	kind    tokenKind
	pos     int // byte offset of the first byte
	end     int // byte offset just past the token
	text    string
	keyword keyword
	val     Value
	isNull  bool
}

// lexer splits a $filter into tokens on demand.
type lexer struct {
	src string
	pos int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdentStart(r rune) bool {
	return r == '_' || (r < utf8.RuneSelf && (r|0x20 >= 'a' && r|0x20 <= 'z')) ||
		(r >= utf8.RuneSelf && unicode.IsLetter(r))
}

func isIdentPart(r rune) bool {
	return isIdentStart(r) || (r >= '0' && r <= '9') ||
		(r >= utf8.RuneSelf && unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Pc, unicode.Cf))
}

// describe renders the text at [pos, end) for an error message.
func (lx *lexer) describe(pos, end int) string {
	if pos >= len(lx.src) {
		return "end of filter"
	}
	if end > len(lx.src) {
		end = len(lx.src)
	}
	t := lx.src[pos:end]
	if len(t) > 40 {
		t = t[:40] + "…"
	}
	return strconv.Quote(t)
}

// next returns the next token, or a positioned InvalidInput error.
func (lx *lexer) next() (token, error) {
	for lx.pos < len(lx.src) && isSpace(lx.src[lx.pos]) {
		lx.pos++
	}
	start := lx.pos
	if start >= len(lx.src) {
		return token{kind: tokEOF, pos: start, end: start}, nil
	}
	c := lx.src[start]
	switch {
	case c == '(':
		lx.pos++
		return token{kind: tokLParen, pos: start, end: lx.pos, text: "("}, nil
	case c == ')':
		lx.pos++
		return token{kind: tokRParen, pos: start, end: lx.pos, text: ")"}, nil
	case c == '\'':
		s, err := lx.quoted(start)
		if err != nil {
			return token{}, err
		}
		return lx.literal(start, StringValue(s)), nil
	case c >= '0' && c <= '9', c == '-' && start+1 < len(lx.src) && lx.src[start+1] >= '0' && lx.src[start+1] <= '9':
		return lx.number(start)
	case c == '-' && strings.HasPrefix(lx.src[start:], "-INF") && !lx.identContinues(start+4):
		lx.pos = start + 4
		return lx.literal(start, DoubleValue(math.Inf(-1))), nil
	}
	r, size := utf8.DecodeRuneInString(lx.src[start:])
	if !isIdentStart(r) {
		what := "unexpected character " + lx.describe(start, start+size)
		switch c {
		case '+', '-', '*', '/', '%':
			what += "; arithmetic is not supported"
		case '"':
			what += "; strings take single quotes"
		}
		return token{}, queryError(start, "%s at position %d.", what, start)
	}
	end := start + size
	for end < len(lx.src) {
		r, size := utf8.DecodeRuneInString(lx.src[end:])
		if !isIdentPart(r) {
			break
		}
		end += size
	}
	word := lx.src[start:end]
	lx.pos = end
	if end < len(lx.src) && lx.src[end] == '\'' {
		return lx.typed(start, word)
	}
	switch word {
	case "NaN":
		return lx.literal(start, DoubleValue(math.NaN())), nil
	case "INF":
		return lx.literal(start, DoubleValue(math.Inf(1))), nil
	}
	t := token{kind: tokIdent, pos: start, end: end, text: word}
	if len(word) <= 5 {
		switch strings.ToLower(word) {
		case "and":
			t.keyword = kwAnd
		case "or":
			t.keyword = kwOr
		case "not":
			t.keyword = kwNot
		case "eq":
			t.keyword = kwEq
		case "ne":
			t.keyword = kwNe
		case "gt":
			t.keyword = kwGt
		case "ge":
			t.keyword = kwGe
		case "lt":
			t.keyword = kwLt
		case "le":
			t.keyword = kwLe
		case "add", "sub", "mul", "div", "mod":
			t.keyword = kwArith
		case "true":
			return lx.literal(start, BoolValue(true)), nil
		case "false":
			return lx.literal(start, BoolValue(false)), nil
		case "null":
			t = lx.literal(start, Value{})
			t.isNull = true
			return t, nil
		}
	}
	return t, nil
}

func (lx *lexer) literal(start int, v Value) token {
	return token{kind: tokLiteral, pos: start, end: lx.pos, text: lx.src[start:lx.pos], val: v}
}

// identContinues reports whether an identifier character sits at i, which
// would make the text before it part of a longer word.
func (lx *lexer) identContinues(i int) bool {
	if i >= len(lx.src) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(lx.src[i:])
	return isIdentPart(r)
}

// quoted reads a single-quoted string at start, in which a doubled quote
// stands for one quote.
func (lx *lexer) quoted(start int) (string, error) {
	i := start + 1
	var b []byte
	from := i
	for {
		j := strings.IndexByte(lx.src[i:], '\'')
		if j < 0 {
			return "", queryError(start, "unterminated string literal starting at position %d.", start)
		}
		i += j
		if i+1 < len(lx.src) && lx.src[i+1] == '\'' {
			b = append(b, lx.src[from:i+1]...)
			i += 2
			from = i
			continue
		}
		lx.pos = i + 1
		if b == nil {
			return lx.src[from:i], nil
		}
		return string(append(b, lx.src[from:i]...)), nil
	}
}

// typed reads prefix'…': datetime, guid, X or binary.
func (lx *lexer) typed(start int, prefix string) (token, error) {
	qpos := lx.pos
	body, err := lx.quoted(qpos)
	if err != nil {
		return token{}, err
	}
	bad := func(kind string) (token, error) {
		return token{}, queryError(start, "malformed %s literal %s at position %d.", kind, lx.describe(start, lx.pos), start)
	}
	switch strings.ToLower(prefix) {
	case "datetime":
		d, ok := ParseDateTime(body)
		if !ok {
			return bad("datetime")
		}
		if !d.Valid() {
			return token{}, queryError(start, "datetime literal %s at position %d is outside 1601-01-01 to 9999-12-31.", lx.describe(start, lx.pos), start)
		}
		return lx.literal(start, DateTimeValue(d)), nil
	case "guid":
		g, ok := ParseGuid(body)
		if !ok {
			return bad("guid")
		}
		return lx.literal(start, GuidValue(g)), nil
	case "x", "binary":
		if len(body)%2 != 0 {
			return bad("binary")
		}
		b, err := hex.DecodeString(body)
		if err != nil {
			return bad("binary")
		}
		return lx.literal(start, BinaryValue(b)), nil
	}
	return token{}, queryError(start, "unsupported literal type %s at position %d.", strconv.Quote(prefix), start)
}

// number reads a numeric literal: Int32 (no suffix), Int64 (L suffix) or
// Double (a fraction, an exponent or a D suffix).
func (lx *lexer) number(start int) (token, error) {
	i := start
	if lx.src[i] == '-' {
		i++
	}
	for i < len(lx.src) && lx.src[i] >= '0' && lx.src[i] <= '9' {
		i++
	}
	isFloat := false
	if i < len(lx.src) && lx.src[i] == '.' {
		i++
		d := i
		for i < len(lx.src) && lx.src[i] >= '0' && lx.src[i] <= '9' {
			i++
		}
		if i == d {
			return token{}, queryError(start, "malformed number %s at position %d.", lx.describe(start, i), start)
		}
		isFloat = true
	}
	if i < len(lx.src) && (lx.src[i] == 'e' || lx.src[i] == 'E') {
		j := i + 1
		if j < len(lx.src) && (lx.src[j] == '+' || lx.src[j] == '-') {
			j++
		}
		d := j
		for j < len(lx.src) && lx.src[j] >= '0' && lx.src[j] <= '9' {
			j++
		}
		if j == d {
			return token{}, queryError(start, "malformed number %s at position %d.", lx.describe(start, j), start)
		}
		i = j
		isFloat = true
	}
	digits := lx.src[start:i]
	suffix := byte(0)
	if i < len(lx.src) {
		switch lx.src[i] {
		case 'L', 'l', 'D', 'd', 'M', 'm', 'F', 'f':
			suffix = lx.src[i] | 0x20
			i++
		}
	}
	if lx.identContinues(i) {
		return token{}, queryError(start, "malformed number %s at position %d.", lx.describe(start, i+1), start)
	}
	lx.pos = i
	switch {
	case suffix == 'l' && !isFloat:
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			return token{}, queryError(start, "Edm.Int64 literal %s at position %d is out of range.", lx.describe(start, i), start)
		}
		return lx.literal(start, Int64Value(n)), nil
	case suffix == 0 && !isFloat:
		n, err := strconv.ParseInt(digits, 10, 32)
		if err != nil {
			// The service answers "Unrecognized 'Edm.Int32' literal" rather
			// than widening (AzureStorageExplorer#1382).
			return token{}, queryError(start, "unrecognized Edm.Int32 literal %s at position %d; use the L suffix for Int64.", lx.describe(start, i), start)
		}
		return lx.literal(start, Int32Value(int32(n))), nil
	case suffix == 0 || suffix == 'd':
		f, err := strconv.ParseFloat(digits, 64)
		if err != nil || math.IsInf(f, 0) {
			return token{}, queryError(start, "Edm.Double literal %s at position %d is out of range.", lx.describe(start, i), start)
		}
		return lx.literal(start, DoubleValue(f)), nil
	}
	return token{}, queryError(start, "unsupported numeric literal %s at position %d.", lx.describe(start, i), start)
}
