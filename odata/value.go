package odata

import (
	"encoding/hex"
	"math"
	"strconv"
)

// Value is one typed Edm value. It is a small struct rather than an interface
// so that properties live in one slice without a heap object each: numbers,
// booleans and ticks sit in n; strings, binary bytes and the 16 GUID bytes
// sit in s. The zero Value has no type and stands for "absent".
type Value struct {
	t Type
	n uint64
	s string
}

// Property is a named custom property of an entity.
type Property struct {
	Name  string
	Value Value
}

// StringValue returns an Edm.String value.
func StringValue(s string) Value { return Value{t: TypeString, s: s} }

// Int32Value returns an Edm.Int32 value.
func Int32Value(v int32) Value { return Value{t: TypeInt32, n: uint64(int64(v))} }

// Int64Value returns an Edm.Int64 value.
func Int64Value(v int64) Value { return Value{t: TypeInt64, n: uint64(v)} }

// DoubleValue returns an Edm.Double value; NaN and ±Inf are allowed.
func DoubleValue(f float64) Value { return Value{t: TypeDouble, n: math.Float64bits(f)} }

// BoolValue returns an Edm.Boolean value.
func BoolValue(b bool) Value {
	if b {
		return Value{t: TypeBoolean, n: 1}
	}
	return Value{t: TypeBoolean}
}

// DateTimeValue returns an Edm.DateTime value.
func DateTimeValue(d DateTime) Value { return Value{t: TypeDateTime, n: uint64(d)} }

// GuidValue returns an Edm.Guid value.
func GuidValue(g Guid) Value { return Value{t: TypeGuid, s: string(g[:])} }

// BinaryValue returns an Edm.Binary value holding a copy of b.
func BinaryValue(b []byte) Value { return Value{t: TypeBinary, s: string(b)} }

// Type returns v's Edm type, or 0 for the zero Value.
func (v Value) Type() Type { return v.t }

// Str returns the text of an Edm.String value ("" for other types).
func (v Value) Str() string {
	if v.t == TypeString {
		return v.s
	}
	return ""
}

// Int32 returns the value of an Edm.Int32.
func (v Value) Int32() int32 { return int32(int64(v.n)) }

// Int64 returns the value of an Edm.Int64.
func (v Value) Int64() int64 { return int64(v.n) }

// Double returns the value of an Edm.Double.
func (v Value) Double() float64 { return math.Float64frombits(v.n) }

// Bool returns the value of an Edm.Boolean.
func (v Value) Bool() bool { return v.n != 0 }

// DateTime returns the value of an Edm.DateTime.
func (v Value) DateTime() DateTime { return DateTime(int64(v.n)) }

// Guid returns the value of an Edm.Guid.
func (v Value) Guid() Guid {
	var g Guid
	copy(g[:], v.s)
	return g
}

// Binary returns a copy of the bytes of an Edm.Binary.
func (v Value) Binary() []byte {
	if v.t != TypeBinary {
		return nil
	}
	return []byte(v.s)
}

// Identical reports whether v and w have the same type and the same bits:
// unlike numeric equality, NaN is identical to itself and -0 is not 0. It is
// the equality of round trips, not of $filter.
func (v Value) Identical(w Value) bool { return v == w }

// String renders v as a $filter literal (e.g. 'text', 12L, datetime'…'),
// which is also a readable debugging form.
func (v Value) String() string {
	switch v.t {
	case TypeString:
		b := []byte{'\''}
		for i := 0; i < len(v.s); i++ {
			if v.s[i] == '\'' {
				b = append(b, '\'')
			}
			b = append(b, v.s[i])
		}
		return string(append(b, '\''))
	case TypeInt32:
		return strconv.FormatInt(int64(v.Int32()), 10)
	case TypeInt64:
		return strconv.FormatInt(v.Int64(), 10) + "L"
	case TypeDouble:
		f := v.Double()
		switch {
		case math.IsNaN(f):
			return "NaN"
		case math.IsInf(f, 1):
			return "INF"
		case math.IsInf(f, -1):
			return "-INF"
		}
		return string(appendDouble(nil, f))
	case TypeBoolean:
		return strconv.FormatBool(v.Bool())
	case TypeDateTime:
		return "datetime'" + v.DateTime().String() + "'"
	case TypeGuid:
		return "guid'" + v.Guid().String() + "'"
	case TypeBinary:
		return "X'" + hex.EncodeToString([]byte(v.s)) + "'"
	}
	return "<none>"
}

// Guid is an Edm.Guid, held in the byte order of its canonical text
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), so that comparing the bytes orders
// GUIDs as .NET's Guid.CompareTo and as their lower-case text do.
type Guid [16]byte

// ParseGuid parses the canonical 36-character form, in either case.
func ParseGuid(s string) (Guid, bool) {
	var g Guid
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return g, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return g, false
		}
		g[j] = hi<<4 | lo
		j++
		i += 2
	}
	return g, true
}

// String returns the canonical lower-case form, as the service writes GUIDs.
func (g Guid) String() string { return string(g.AppendText(nil)) }

// AppendText appends the canonical lower-case form.
func (g Guid) AppendText(dst []byte) []byte {
	const digits = "0123456789abcdef"
	for i, b := range g {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, digits[b>>4], digits[b&15])
	}
	return dst
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendDouble writes a finite double the way the service does: the shortest
// text that round-trips, always with a fractional part or exponent so that a
// reader does not take it for an Int32 (1.0, not 1). Exponents follow the
// ECMAScript thresholds, as encoding/json does.
func appendDouble(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	start := len(dst)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
		// Turn e-07 into e-7 like encoding/json, for a canonical form.
		n := len(dst)
		if n-start >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
		return dst
	}
	dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
	for _, c := range dst[start:] {
		if c == '.' {
			return dst
		}
	}
	return append(dst, '.', '0')
}
