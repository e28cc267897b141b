package odata

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tabuladb/tabula/internal/base"
)

// encodingVersion is the first byte of every stored entity value. A decoder
// that meets another version refuses it rather than guess.
const encodingVersion = 1

// The stored entity value (docs/entity-encoding.md):
//
//	version  1 byte (1)
//	ticks    8 bytes little-endian: Timestamp
//	count    uvarint: number of custom properties
//	count × { uvarint name length, name bytes, type tag byte, value }
//
// with values Int32 4 bytes LE; Int64, Double (IEEE bits), DateTime (ticks)
// 8 bytes LE; Boolean 1 byte (0 or 1); Guid 16 bytes; String and Binary a
// uvarint length then the bytes. PartitionKey and RowKey live in the storage
// key, not here.

// AppendEncoded appends the stored form of an entity's Timestamp and custom
// properties to dst. The properties must have been validated; values without
// a type are skipped.
func AppendEncoded(dst []byte, ts DateTime, props []Property) []byte {
	count := 0
	for i := range props {
		if props[i].Value.t.Valid() {
			count++
		}
	}
	dst = append(dst, encodingVersion)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(ts))
	dst = binary.AppendUvarint(dst, uint64(count))
	for i := range props {
		v := props[i].Value
		if !v.t.Valid() {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(props[i].Name)))
		dst = append(dst, props[i].Name...)
		dst = append(dst, byte(v.t))
		switch v.t {
		case TypeInt32:
			dst = binary.LittleEndian.AppendUint32(dst, uint32(v.n))
		case TypeInt64, TypeDouble, TypeDateTime:
			dst = binary.LittleEndian.AppendUint64(dst, v.n)
		case TypeBoolean:
			dst = append(dst, byte(v.n&1))
		case TypeGuid:
			dst = append(dst, v.s...)
		case TypeString, TypeBinary:
			dst = binary.AppendUvarint(dst, uint64(len(v.s)))
			dst = append(dst, v.s...)
		}
	}
	return dst
}

// EncodeEntity returns the stored form of e (its Timestamp and properties).
func EncodeEntity(e *Entity) []byte {
	n := 16
	for i := range e.Properties {
		n += len(e.Properties[i].Name) + len(e.Properties[i].Value.s) + 12
	}
	return AppendEncoded(make([]byte, 0, n), e.Timestamp, e.Properties)
}

// DecodeEncoded decodes a stored entity value into its Timestamp and
// properties. Any malformed input yields an error wrapping
// base.ErrCorruption; it never panics.
func DecodeEncoded(b []byte) (DateTime, []Property, error) {
	r, err := openEncoded(b)
	if err != nil {
		return 0, nil, err
	}
	// Every property takes at least 3 bytes, which bounds a corrupt count.
	capHint := r.remaining
	if max := len(b) / 3; capHint > max {
		capHint = max
	}
	props := make([]Property, 0, capHint)
	for {
		name, v, ok := r.next()
		if !ok {
			break
		}
		props = append(props, Property{Name: string(name), Value: v.value()})
	}
	if r.err != nil {
		return 0, nil, r.err
	}
	return r.ts, props, nil
}

// DecodeEntityBinary fills e's Timestamp and Properties from a stored value;
// the keys are left as they are, for the caller to set from the storage key.
func DecodeEntityBinary(b []byte, e *Entity) error {
	ts, props, err := DecodeEncoded(b)
	if err != nil {
		return err
	}
	e.Timestamp, e.Properties = ts, props
	return nil
}

// EncodedTimestamp reads just the Timestamp of a stored value, which is all
// an ETag needs.
func EncodedTimestamp(b []byte) (DateTime, error) {
	if len(b) < 9 || b[0] != encodingVersion {
		return 0, corrupt(0, "bad header")
	}
	return DateTime(binary.LittleEndian.Uint64(b[1:9])), nil
}

func corrupt(off int, what string) error {
	return fmt.Errorf("odata: stored entity: %s at offset %d: %w", what, off, base.ErrCorruption)
}

// rawValue is a property value viewed in place in the stored bytes, so that
// filters and the JSON encoder read it without copying.
type rawValue struct {
	t    Type
	n    uint64
	data []byte // String, Binary and Guid bytes
}

func (v rawValue) value() Value {
	return Value{t: v.t, n: v.n, s: string(v.data)}
}

// encodedReader walks the properties of a stored value in place.
type encodedReader struct {
	b         []byte
	off       int
	remaining int
	ts        DateTime
	err       error
}

func openEncoded(b []byte) (encodedReader, error) {
	if len(b) < 10 {
		return encodedReader{}, corrupt(0, "truncated header")
	}
	if b[0] != encodingVersion {
		return encodedReader{}, corrupt(0, fmt.Sprintf("unknown version %d", b[0]))
	}
	ts := DateTime(binary.LittleEndian.Uint64(b[1:9]))
	count, n := uvarint(b[9:])
	if n <= 0 || count > uint64(len(b)) {
		return encodedReader{}, corrupt(9, "bad property count")
	}
	return encodedReader{b: b, off: 9 + n, remaining: int(count), ts: ts}, nil
}

// next returns the next property. At the end, or at the first malformed
// byte (r.err set), it returns ok == false.
func (r *encodedReader) next() (name []byte, v rawValue, ok bool) {
	if r.remaining == 0 {
		if r.err == nil && r.off != len(r.b) {
			r.err = corrupt(r.off, "trailing bytes")
		}
		return nil, rawValue{}, false
	}
	if r.err != nil {
		return nil, rawValue{}, false
	}
	b, off := r.b, r.off
	nameLen, n := uvarint(b[off:])
	if n <= 0 || nameLen > uint64(len(b)-off-n) {
		r.err = corrupt(off, "bad name length")
		return nil, rawValue{}, false
	}
	off += n
	name = b[off : off+int(nameLen)]
	off += int(nameLen)
	if off >= len(b) {
		r.err = corrupt(off, "missing type tag")
		return nil, rawValue{}, false
	}
	v.t = Type(b[off])
	off++
	rest := len(b) - off
	switch v.t {
	case TypeInt32:
		if rest < 4 {
			break
		}
		v.n = uint64(int64(int32(binary.LittleEndian.Uint32(b[off:]))))
		off += 4
		ok = true
	case TypeInt64, TypeDateTime, TypeDouble:
		if rest < 8 {
			break
		}
		v.n = binary.LittleEndian.Uint64(b[off:])
		off += 8
		ok = true
	case TypeBoolean:
		if rest < 1 || b[off] > 1 {
			break
		}
		v.n = uint64(b[off])
		off++
		ok = true
	case TypeGuid:
		if rest < 16 {
			break
		}
		v.data = b[off : off+16 : off+16]
		off += 16
		ok = true
	case TypeString, TypeBinary:
		l, n := uvarint(b[off:])
		if n <= 0 || l > uint64(rest-n) {
			break
		}
		off += n
		v.data = b[off : off+int(l) : off+int(l)]
		off += int(l)
		ok = true
	}
	if !ok {
		r.err = corrupt(r.off, "bad value of property "+fmt.Sprintf("%q", name))
		return nil, rawValue{}, false
	}
	r.off = off
	r.remaining--
	return name, v, true
}

// uvarint reads a varint as binary.Uvarint does but also refuses a
// non-minimal encoding (such as 0x80 0x00 for 0), so that every valid value
// has exactly one encoding and re-encoding a decoded value reproduces it.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, -n
	}
	return v, n
}

// float returns a numeric raw value as float64 for Int32/Double promotion.
func (v rawValue) float() float64 {
	if v.t == TypeDouble {
		return math.Float64frombits(v.n)
	}
	return float64(int64(v.n))
}
