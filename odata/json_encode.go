package odata

import (
	"encoding/base64"
	"math"
	"strconv"
	"strings"
)

// Metadata is the OData JSON metadata level a client asked for with
// Accept: application/json;odata=… or $format.
type Metadata uint8

// The three JSON metadata levels.
const (
	NoMetadata Metadata = iota
	MinimalMetadata
	FullMetadata
)

// ParseMetadata maps an odata= parameter value to a Metadata level.
func ParseMetadata(s string) (Metadata, bool) {
	switch strings.ToLower(s) {
	case "nometadata":
		return NoMetadata, true
	case "minimalmetadata":
		return MinimalMetadata, true
	case "fullmetadata":
		return FullMetadata, true
	}
	return 0, false
}

// String returns the odata= parameter value for m.
func (m Metadata) String() string {
	switch m {
	case MinimalMetadata:
		return "minimalmetadata"
	case FullMetadata:
		return "fullmetadata"
	}
	return "nometadata"
}

// EncodeOptions is what the JSON encoder needs to know about a response.
type EncodeOptions struct {
	Metadata Metadata
	// BaseURL is the service root as the client addressed it, e.g.
	// "https://acct.table.core.windows.net/" or
	// "http://127.0.0.1:10002/devstoreaccount1/"; a missing final slash is
	// added. odata.metadata and odata.id are built from it.
	BaseURL string
	// Account names the account in full metadata's odata.type ("acct.table").
	Account string
	// Table is the table the entities belong to.
	Table string
	// Select restricts the properties written; nil writes all of them.
	Select *Selection
	// AnnotateWholeDoubles also annotates Edm.Double values that have no
	// fractional part at minimal metadata. The service does not (a reader
	// that drops ".0" then sees an Int32; azure-sdk-for-js#19899), so this is
	// off by default.
	AnnotateWholeDoubles bool
}

// Encoder writes entities and tables as OData v3 JSON at one metadata level.
// It precomputes the per-response strings once; each call only appends to
// the caller's buffer, reading property values in place from the stored
// encoding, so encoding an entity allocates nothing.
type Encoder struct {
	opts        EncodeOptions
	base        string // BaseURL with a final '/'
	metadataURL string // base + "$metadata#" + table
	elementURL  string // metadataURL + "/@Element"
	typeName    string // account + "." + table
	idPrefix    string // base + table + "(PartitionKey='"
}

// NewEncoder prepares an Encoder for opts.
func NewEncoder(opts EncodeOptions) *Encoder {
	base := opts.BaseURL
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	e := &Encoder{opts: opts, base: base}
	// Only the strings the metadata level writes: at no metadata, the
	// point reads of a busy server would otherwise build four for nothing.
	if opts.Metadata >= MinimalMetadata {
		e.metadataURL = base + "$metadata#" + opts.Table
		e.elementURL = e.metadataURL + "/@Element"
	}
	if opts.Metadata == FullMetadata {
		e.typeName = opts.Account + "." + opts.Table
		e.idPrefix = base + opts.Table
	}
	return e
}

// Options returns the options the Encoder was made with.
func (e *Encoder) Options() EncodeOptions { return e.opts }

// AppendEntity appends one entity as an element of a query feed: stored is
// its stored value (AppendEncoded), pk and rk its keys, etag its ETag; an
// empty etag is derived from the stored Timestamp (AppendETag). The error,
// if any, is a corrupt stored value, and dst is then returned unchanged.
func (e *Encoder) AppendEntity(dst []byte, pk, rk []byte, etag string, stored []byte) ([]byte, error) {
	return e.appendEntity(dst, pk, rk, etag, stored, false)
}

// AppendEntityResponse appends a single entity as the whole response body of
// a point query or an insert, which adds odata.metadata ("…#table/@Element")
// at minimal and full metadata.
func (e *Encoder) AppendEntityResponse(dst []byte, pk, rk []byte, etag string, stored []byte) ([]byte, error) {
	return e.appendEntity(dst, pk, rk, etag, stored, true)
}

// AppendEntityValue appends an in-memory entity as AppendEntityResponse
// does; it encodes e first, so it allocates.
func (e *Encoder) AppendEntityValue(dst []byte, ent *Entity, etag string) []byte {
	out, err := e.appendEntity(dst, []byte(ent.PartitionKey), []byte(ent.RowKey), etag, EncodeEntity(ent), true)
	if err != nil {
		return dst // unreachable: EncodeEntity's output always decodes
	}
	return out
}

func (e *Encoder) appendEntity(dst []byte, pk, rk []byte, etag string, stored []byte, single bool) ([]byte, error) {
	r, err := openEncoded(stored)
	if err != nil {
		return dst, err
	}
	orig := len(dst)
	o := &e.opts
	sel := o.Select
	dst = append(dst, '{')
	open := len(dst)
	if single && o.Metadata != NoMetadata {
		dst = append(dst, `"odata.metadata":`...)
		dst = appendJSONString(dst, e.elementURL)
	}
	if o.Metadata == FullMetadata {
		dst = sep(dst, open)
		dst = append(dst, `"odata.type":`...)
		dst = appendJSONString(dst, e.typeName)
		dst = append(dst, `,"odata.id":"`...)
		dst = appendJSONStringBody(dst, e.idPrefix)
		dst = appendKeyPredicate(dst, pk, rk)
		dst = append(dst, '"')
	}
	if o.Metadata != NoMetadata {
		dst = sep(dst, open)
		dst = append(dst, `"odata.etag":`...)
		if etag == "" {
			var buf [64]byte
			dst = appendJSONString(dst, AppendETag(buf[:0], r.ts))
		} else {
			dst = appendJSONString(dst, etag)
		}
	}
	if o.Metadata == FullMetadata {
		dst = append(dst, `,"odata.editLink":"`...)
		dst = appendJSONStringBody(dst, e.opts.Table)
		dst = appendKeyPredicate(dst, pk, rk)
		dst = append(dst, '"')
	}
	if sel.has(PartitionKeyName) {
		dst = sep(dst, open)
		dst = append(dst, `"PartitionKey":`...)
		dst = appendJSONString(dst, pk)
	}
	if sel.has(RowKeyName) {
		dst = sep(dst, open)
		dst = append(dst, `"RowKey":`...)
		dst = appendJSONString(dst, rk)
	}
	if sel.has(TimestampName) {
		dst = sep(dst, open)
		if o.Metadata == FullMetadata {
			dst = append(dst, `"Timestamp@odata.type":"Edm.DateTime",`...)
		}
		dst = append(dst, `"Timestamp":"`...)
		dst = r.ts.AppendText(dst)
		dst = append(dst, '"')
	}
	var seen selMask
	for {
		name, v, ok := r.next()
		if !ok {
			break
		}
		if sel != nil {
			i := sel.index(name)
			if i < 0 {
				continue
			}
			seen.set(i)
		}
		dst = sep(dst, open)
		dst = e.appendProperty(dst, name, v)
	}
	if r.err != nil {
		return dst[:orig], r.err
	}
	if sel != nil {
		// The service answers a selected property the entity lacks with
		// null (Azurite#2535 shows Azure doing so).
		for i, name := range sel.names {
			if !seen.get(i) {
				dst = sep(dst, open)
				dst = appendJSONString(dst, name)
				dst = append(dst, ":null"...)
			}
		}
	}
	return append(dst, '}'), nil
}

// sep writes the comma between members of the object opened at open.
func sep(dst []byte, open int) []byte {
	if len(dst) > open {
		return append(dst, ',')
	}
	return dst
}

// appendProperty writes one custom property with the annotation its type and
// the metadata level call for. Minimal and full metadata annotate the types
// JSON cannot carry: Int64 (a string), DateTime, Guid, Binary, and Double
// when its value is NaN or infinite (a string too).
func (e *Encoder) appendProperty(dst []byte, name []byte, v rawValue) []byte {
	annotate := false
	if e.opts.Metadata != NoMetadata {
		switch v.t {
		case TypeInt64, TypeDateTime, TypeGuid, TypeBinary:
			annotate = true
		case TypeDouble:
			f := math.Float64frombits(v.n)
			annotate = math.IsNaN(f) || math.IsInf(f, 0) ||
				(e.opts.AnnotateWholeDoubles && f == math.Trunc(f))
		}
	}
	if annotate {
		dst = append(dst, '"')
		dst = appendJSONStringBody(dst, name)
		dst = append(dst, `@odata.type":"`...)
		dst = append(dst, v.t.String()...)
		dst = append(dst, `",`...)
	}
	dst = appendJSONString(dst, name)
	dst = append(dst, ':')
	return appendRawValue(dst, v)
}

// appendRawValue writes a value as JSON light carries it.
func appendRawValue(dst []byte, v rawValue) []byte {
	switch v.t {
	case TypeString:
		return appendJSONString(dst, v.data)
	case TypeInt32:
		return strconv.AppendInt(dst, int64(v.n), 10)
	case TypeInt64:
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, int64(v.n), 10)
		return append(dst, '"')
	case TypeDouble:
		f := math.Float64frombits(v.n)
		switch {
		case math.IsNaN(f):
			return append(dst, `"NaN"`...)
		case math.IsInf(f, 1):
			return append(dst, `"Infinity"`...)
		case math.IsInf(f, -1):
			return append(dst, `"-Infinity"`...)
		}
		return appendDouble(dst, f)
	case TypeBoolean:
		if v.n != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case TypeDateTime:
		dst = append(dst, '"')
		dst = DateTime(int64(v.n)).AppendText(dst)
		return append(dst, '"')
	case TypeGuid:
		var g Guid
		copy(g[:], v.data)
		dst = append(dst, '"')
		dst = g.AppendText(dst)
		return append(dst, '"')
	case TypeBinary:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.data)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// appendKeyPredicate writes (PartitionKey='pk',RowKey='rk') as the service
// writes it in odata.id and odata.editLink: quotes doubled, then
// percent-encoded like a URL path, then JSON-escaped.
func appendKeyPredicate(dst []byte, pk, rk []byte) []byte {
	dst = append(dst, "(PartitionKey='"...)
	dst = appendKeyLiteral(dst, pk)
	dst = append(dst, "',RowKey='"...)
	dst = appendKeyLiteral(dst, rk)
	return append(dst, "')"...)
}

func appendKeyLiteral[T ~string | ~[]byte](dst []byte, k T) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '\'':
			dst = append(dst, "''"...)
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			strings.IndexByte("-._~!$&()*+,;=:@", c) >= 0:
			dst = append(dst, c)
		default:
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return dst
}

// AppendTableResponse appends a single table as the response body of
// Create Table.
func (e *Encoder) AppendTableResponse(dst []byte, name string) []byte {
	return e.appendTable(dst, name, true)
}

func (e *Encoder) appendTable(dst []byte, name string, single bool) []byte {
	dst = append(dst, '{')
	if single && e.opts.Metadata != NoMetadata {
		dst = append(dst, `"odata.metadata":`...)
		dst = appendJSONString(dst, e.base+"$metadata#Tables/@Element")
		dst = append(dst, ',')
	}
	if e.opts.Metadata == FullMetadata {
		dst = append(dst, `"odata.type":`...)
		dst = appendJSONString(dst, e.opts.Account+".Tables")
		dst = append(dst, `,"odata.id":"`...)
		dst = appendJSONStringBody(dst, e.base)
		dst = appendTableKey(dst, name)
		dst = append(dst, `","odata.editLink":"`...)
		dst = appendTableKey(dst, name)
		dst = append(dst, `",`...)
	}
	dst = append(dst, `"TableName":`...)
	dst = appendJSONString(dst, name)
	return append(dst, '}')
}

func appendTableKey(dst []byte, name string) []byte {
	dst = append(dst, "Tables('"...)
	dst = appendKeyLiteral(dst, name)
	return append(dst, "')"...)
}

// appendJSONString appends s as a quoted JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does, so the output is always valid JSON.
func appendJSONString[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

func appendJSONStringBody[T ~string | ~[]byte](dst []byte, s T) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			}
			i++
			start = i
			continue
		}
		n := utf8Len(s[i:])
		if n == 0 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += n
	}
	return append(dst, s[start:]...)
}

// utf8Len returns the length of the valid UTF-8 sequence at the start of s,
// or 0 when it is invalid (overlong, surrogate, beyond U+10FFFF, truncated).
func utf8Len[T ~string | ~[]byte](s T) int {
	c := s[0]
	switch {
	case c < 0x80:
		return 1
	case c >= 0xc2 && c <= 0xdf:
		if len(s) >= 2 && s[1]&0xc0 == 0x80 {
			return 2
		}
	case c >= 0xe0 && c <= 0xef:
		if len(s) < 3 || s[1]&0xc0 != 0x80 || s[2]&0xc0 != 0x80 {
			return 0
		}
		if (c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) {
			return 0
		}
		return 3
	case c >= 0xf0 && c <= 0xf4:
		if len(s) < 4 || s[1]&0xc0 != 0x80 || s[2]&0xc0 != 0x80 || s[3]&0xc0 != 0x80 {
			return 0
		}
		if (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f) {
			return 0
		}
		return 4
	}
	return 0
}
