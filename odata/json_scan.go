package odata

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonKind is the kind of a scanned JSON value.
type jsonKind uint8

const (
	jsonString jsonKind = iota + 1
	jsonNumber
	jsonTrue
	jsonFalse
	jsonNull
	jsonObject
	jsonArray
)

// jsonValue is a scalar as scanned: text is the unescaped string or the
// number's literal; objects and arrays are skipped and keep no text.
type jsonValue struct {
	kind jsonKind
	text string
	pos  int
}

// maxJSONDepth bounds nesting in skipped values so that hostile bodies cannot
// exhaust the stack.
const maxJSONDepth = 64

// jsonScanner reads a JSON document held in one string. Unescaped strings are
// substrings of it, so a body costs one copy however many properties it has.
type jsonScanner struct {
	s   string
	pos int
}

func (sc *jsonScanner) fail(what string) error {
	return invalidInput("The request body is not valid JSON: " + what + " at offset " + itoa(sc.pos) + ".")
}

func itoa(n int) string {
	var b [20]byte
	return string(appendDigits(b[:0], int64(n), 1))
}

func (sc *jsonScanner) skipWS() {
	for sc.pos < len(sc.s) {
		switch sc.s[sc.pos] {
		case ' ', '\t', '\n', '\r':
			sc.pos++
		default:
			return
		}
	}
}

// consume skips whitespace and, when the next byte is c, consumes it.
func (sc *jsonScanner) consume(c byte) bool {
	sc.skipWS()
	if sc.pos < len(sc.s) && sc.s[sc.pos] == c {
		sc.pos++
		return true
	}
	return false
}

// readString reads a string whose opening quote is at sc.pos.
func (sc *jsonScanner) readString() (string, error) {
	if sc.pos >= len(sc.s) || sc.s[sc.pos] != '"' {
		return "", sc.fail("expected a string")
	}
	sc.pos++
	start := sc.pos
	escaped := false
	for {
		if sc.pos >= len(sc.s) {
			return "", sc.fail("unterminated string")
		}
		c := sc.s[sc.pos]
		switch {
		case c == '"':
			raw := sc.s[start:sc.pos]
			sc.pos++
			if !escaped {
				return raw, nil
			}
			return unescapeJSON(raw), nil
		case c == '\\':
			escaped = true
			if sc.pos+1 >= len(sc.s) {
				return "", sc.fail("unterminated escape")
			}
			switch sc.s[sc.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				sc.pos += 2
			case 'u':
				if sc.pos+6 > len(sc.s) || !isHex4(sc.s[sc.pos+2:sc.pos+6]) {
					return "", sc.fail("bad \\u escape")
				}
				sc.pos += 6
			default:
				return "", sc.fail("bad escape")
			}
		case c < 0x20:
			return "", sc.fail("control character in string")
		case c < utf8.RuneSelf:
			sc.pos++
		default:
			r, size := utf8.DecodeRuneInString(sc.s[sc.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", sc.fail("invalid UTF-8")
			}
			sc.pos += size
		}
	}
}

func isHex4(s string) bool {
	for i := 0; i < 4; i++ {
		if _, ok := unhex(s[i]); !ok {
			return false
		}
	}
	return true
}

func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		d, _ := unhex(s[i])
		r = r<<4 | rune(d)
	}
	return r
}

// unescapeJSON decodes a string body already checked by readString. A lone
// surrogate becomes U+FFFD, as encoding/json does: UTF-8 cannot hold it.
func unescapeJSON(raw string) string {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r := hex4(raw[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if r2 := hex4(raw[i+2 : i+6]); r2 >= 0xdc00 && r2 <= 0xdfff {
						b.WriteRune(utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			b.WriteRune(r)
			continue
		default: // '"', '\\', '/'
			b.WriteByte(raw[i+1])
		}
		i += 2
	}
	return b.String()
}

// readNumber reads a number at sc.pos, enforcing JSON's grammar.
func (sc *jsonScanner) readNumber() (string, error) {
	start := sc.pos
	end, ok := scanJSONNumber(sc.s, start)
	if !ok {
		return "", sc.fail("malformed number")
	}
	sc.pos = end
	return sc.s[start:end], nil
}

// scanJSONNumber matches -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)? at s[i:] and
// returns where it ends.
func scanJSONNumber(s string, i int) (int, bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return i, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return i, false
		}
	}
	return i, true
}

// isJSONNumber reports whether all of s is one JSON number.
func isJSONNumber(s string) bool {
	end, ok := scanJSONNumber(s, 0)
	return ok && end == len(s)
}

// readValue reads any value; objects and arrays are validated and skipped.
func (sc *jsonScanner) readValue(depth int) (jsonValue, error) {
	sc.skipWS()
	if sc.pos >= len(sc.s) {
		return jsonValue{}, sc.fail("unexpected end of input")
	}
	v := jsonValue{pos: sc.pos}
	switch c := sc.s[sc.pos]; {
	case c == '"':
		s, err := sc.readString()
		v.kind, v.text = jsonString, s
		return v, err
	case c == '-' || (c >= '0' && c <= '9'):
		s, err := sc.readNumber()
		v.kind, v.text = jsonNumber, s
		return v, err
	case strings.HasPrefix(sc.s[sc.pos:], "true"):
		sc.pos += 4
		v.kind = jsonTrue
	case strings.HasPrefix(sc.s[sc.pos:], "false"):
		sc.pos += 5
		v.kind = jsonFalse
	case strings.HasPrefix(sc.s[sc.pos:], "null"):
		sc.pos += 4
		v.kind = jsonNull
	case c == '{' || c == '[':
		if depth >= maxJSONDepth {
			return v, sc.fail("nesting too deep")
		}
		if c == '{' {
			v.kind = jsonObject
			return v, sc.skipObject(depth + 1)
		}
		v.kind = jsonArray
		return v, sc.skipArray(depth + 1)
	default:
		return v, sc.fail("unexpected character")
	}
	return v, nil
}

func (sc *jsonScanner) skipObject(depth int) error {
	sc.pos++ // '{'
	if sc.consume('}') {
		return nil
	}
	for {
		sc.skipWS()
		if _, err := sc.readString(); err != nil {
			return err
		}
		if !sc.consume(':') {
			return sc.fail("expected ':'")
		}
		if _, err := sc.readValue(depth); err != nil {
			return err
		}
		if sc.consume(',') {
			continue
		}
		if sc.consume('}') {
			return nil
		}
		return sc.fail("expected ',' or '}'")
	}
}

func (sc *jsonScanner) skipArray(depth int) error {
	sc.pos++ // '['
	if sc.consume(']') {
		return nil
	}
	for {
		if _, err := sc.readValue(depth); err != nil {
			return err
		}
		if sc.consume(',') {
			continue
		}
		if sc.consume(']') {
			return nil
		}
		return sc.fail("expected ',' or ']'")
	}
}

// scanObject reads a top-level JSON object, calling member for each key and
// value in order, and checks that nothing but whitespace follows it.
func (sc *jsonScanner) scanObject(member func(key string, v jsonValue) error) error {
	if !sc.consume('{') {
		sc.skipWS()
		if sc.pos >= len(sc.s) {
			return invalidInput("The request body is empty.")
		}
		return invalidInput("The request body must be a JSON object.")
	}
	if !sc.consume('}') {
		for {
			sc.skipWS()
			key, err := sc.readString()
			if err != nil {
				return err
			}
			if !sc.consume(':') {
				return sc.fail("expected ':'")
			}
			v, err := sc.readValue(1)
			if err != nil {
				return err
			}
			if err := member(key, v); err != nil {
				return err
			}
			if sc.consume(',') {
				continue
			}
			if sc.consume('}') {
				break
			}
			return sc.fail("expected ',' or '}'")
		}
	}
	sc.skipWS()
	if sc.pos != len(sc.s) {
		return sc.fail("data after the object")
	}
	return nil
}
