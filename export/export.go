// Package export is the JSON-lines format of tabula export and tabula
// import: tables and their entities, one JSON object per line, with every
// Edm type kept exactly (Int64 beyond 2^53, DateTime to 100 ns, Binary,
// Guid, Double NaN, ±Inf and -0, strings that are not valid UTF-8). A
// Writer and a Reader each hold one line at a time, so files of any size
// stream through constant memory. docs/export.md describes the format,
// version 1.
package export

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/tabuladb/tabula/odata"
)

// FormatVersion is the version of the line format this package writes,
// and the only one it reads.
const FormatVersion = 1

// formatName is the header line's format field.
const formatName = "tabula-export"

// MaxLineBytes bounds a line. An entity is at most 1 MiB as the service
// counts it; JSON escaping can grow a string up to six times.
const MaxLineBytes = 8 << 20

// ErrMalformed is wrapped by every error about a malformed or truncated file.
var ErrMalformed = errors.New("malformed export file")

// LineError locates a problem in an export file: the line (from 1), the
// byte offset of the line's start in the file, and the column (byte in the
// line, from 1) when known.
type LineError struct {
	Line   int
	Offset int64
	Column int
	Err    error
}

func (e *LineError) Error() string {
	if e.Column > 0 {
		return fmt.Sprintf("line %d (byte offset %d), column %d: %v", e.Line, e.Offset, e.Column, e.Err)
	}
	return fmt.Sprintf("line %d (byte offset %d): %v", e.Line, e.Offset, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// Kind is the kind of a line.
type Kind int

// The kinds of line, in the order they may appear: one header, then per
// table a table line followed by its entities, then one end line.
const (
	KindHeader Kind = iota + 1
	KindTable
	KindEntity
	KindEnd
)

// Item is one decoded line.
type Item struct {
	Kind    Kind
	Version int           // KindHeader
	Account string        // KindTable
	Table   string        // KindTable
	Entity  *odata.Entity // KindEntity; Timestamp is the exported one (0 if absent)
	// KindEnd: the counts the writer wrote.
	Tables, Entities int64
}

// The JSON shapes of the lines. Exactly one field of line is set.
type line struct {
	Format  string      `json:"format,omitempty"`
	Version int         `json:"version,omitempty"`
	Table   *tableLine  `json:"table,omitempty"`
	Entity  *entityLine `json:"entity,omitempty"`
	End     *endLine    `json:"end,omitempty"`
}

type tableLine struct {
	Account string `json:"account"`
	Name    string `json:"name"`
}

type entityLine struct {
	PK    json.RawMessage   `json:"pk"`
	RK    json.RawMessage   `json:"rk"`
	TS    string            `json:"ts,omitempty"`
	Props []json.RawMessage `json:"props"`
}

type endLine struct {
	Tables   int64 `json:"tables"`
	Entities int64 `json:"entities"`
}

// Writer writes an export file.
type Writer struct {
	w                *bufio.Writer
	buf              []byte
	tables, entities int64
	inTable          bool
	err              error
}

// NewWriter writes the header line to w and returns a Writer.
func NewWriter(w io.Writer) *Writer {
	ew := &Writer{w: bufio.NewWriterSize(w, 256<<10)}
	ew.line(fmt.Appendf(nil, `{"format":%q,"version":%d}`, formatName, FormatVersion))
	return ew
}

func (w *Writer) line(b []byte) error {
	if w.err != nil {
		return w.err
	}
	if _, err := w.w.Write(append(b, '\n')); err != nil {
		w.err = fmt.Errorf("export: write: %w", err)
	}
	return w.err
}

// Table starts a table: the entities written next belong to it.
func (w *Writer) Table(account, name string) error {
	b, err := json.Marshal(line{Table: &tableLine{Account: account, Name: name}})
	if err != nil {
		return fmt.Errorf("export: table %q: %w", name, err)
	}
	w.tables++
	w.inTable = true
	return w.line(b)
}

// Entity writes an entity of the current table.
func (w *Writer) Entity(e *odata.Entity) error {
	if !w.inTable {
		return errors.New("export: an entity before any table")
	}
	w.buf = AppendEntityLine(w.buf[:0], e)
	w.entities++
	return w.line(w.buf)
}

// Close writes the end line (the counts, by which a reader knows the file
// is whole) and flushes. It does not close the underlying writer.
func (w *Writer) Close() error {
	w.line(fmt.Appendf(nil, `{"end":{"tables":%d,"entities":%d}}`, w.tables, w.entities))
	if w.err == nil {
		if err := w.w.Flush(); err != nil {
			w.err = fmt.Errorf("export: write: %w", err)
		}
	}
	return w.err
}

// Counts returns the tables and entities written so far.
func (w *Writer) Counts() (tables, entities int64) { return w.tables, w.entities }

// AppendEntityLine appends the entity line of e, without the newline.
func AppendEntityLine(dst []byte, e *odata.Entity) []byte {
	dst = append(dst, `{"entity":{"pk":`...)
	dst = appendString(dst, e.PartitionKey)
	dst = append(dst, `,"rk":`...)
	dst = appendString(dst, e.RowKey)
	if e.Timestamp != 0 {
		dst = append(dst, `,"ts":"`...)
		dst = e.Timestamp.AppendFixed(dst)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"props":[`...)
	for i, p := range e.Properties {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		dst = appendJSONString(dst, p.Name) // names are valid identifiers
		dst = append(dst, ',', '"')
		dst = append(dst, p.Value.Type().String()...)
		dst = append(dst, '"', ',')
		dst = appendValue(dst, p.Value)
		dst = append(dst, ']')
	}
	return append(dst, "]}}"...)
}

// appendString writes s as a JSON string, or, when s is not valid UTF-8
// (which JSON cannot carry), as {"bytes":"<base64>"}.
func appendString(dst []byte, s string) []byte {
	if utf8.ValidString(s) {
		return appendJSONString(dst, s)
	}
	dst = append(dst, `{"bytes":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, []byte(s))
	return append(dst, `"}`...)
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // valid UTF-8: never fails, never alters
	return append(dst, b...)
}

func appendValue(dst []byte, v odata.Value) []byte {
	switch v.Type() {
	case odata.TypeString:
		return appendString(dst, v.Str())
	case odata.TypeInt32:
		return strconv.AppendInt(dst, int64(v.Int32()), 10)
	case odata.TypeInt64:
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, v.Int64(), 10)
		return append(dst, '"')
	case odata.TypeDouble:
		dst = append(dst, '"')
		dst = appendDouble(dst, v.Double())
		return append(dst, '"')
	case odata.TypeBoolean:
		return strconv.AppendBool(dst, v.Bool())
	case odata.TypeDateTime:
		dst = append(dst, '"')
		dst = v.DateTime().AppendFixed(dst)
		return append(dst, '"')
	case odata.TypeGuid:
		dst = append(dst, '"')
		dst = v.Guid().AppendText(dst)
		return append(dst, '"')
	case odata.TypeBinary:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Binary())
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

func appendDouble(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// DecodeLine decodes one line (without its newline). Errors wrap
// ErrMalformed; a *json.SyntaxError's offset is reported as a column by
// Reader.
func DecodeLine(b []byte) (Item, error) {
	var l line
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if dec.More() {
		return Item{}, fmt.Errorf("%w: more than one JSON value on the line", ErrMalformed)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Item{}, fmt.Errorf("%w: text after the JSON value", ErrMalformed)
	}
	n := 0
	for _, set := range []bool{l.Format != "" || l.Version != 0, l.Table != nil, l.Entity != nil, l.End != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Item{}, fmt.Errorf("%w: a line is exactly one of a header, a table, an entity or the end", ErrMalformed)
	}
	switch {
	case l.Format != "" || l.Version != 0:
		if l.Format != formatName {
			return Item{}, fmt.Errorf("%w: format %q is not %q", ErrMalformed, l.Format, formatName)
		}
		if l.Version != FormatVersion {
			return Item{}, fmt.Errorf("%w: format version %d; this build reads version %d", ErrMalformed, l.Version, FormatVersion)
		}
		return Item{Kind: KindHeader, Version: l.Version}, nil
	case l.Table != nil:
		if l.Table.Account == "" || l.Table.Name == "" {
			return Item{}, fmt.Errorf("%w: a table line needs an account and a name", ErrMalformed)
		}
		return Item{Kind: KindTable, Account: l.Table.Account, Table: l.Table.Name}, nil
	case l.End != nil:
		if l.End.Tables < 0 || l.End.Entities < 0 {
			return Item{}, fmt.Errorf("%w: negative counts", ErrMalformed)
		}
		return Item{Kind: KindEnd, Tables: l.End.Tables, Entities: l.End.Entities}, nil
	}
	e, err := decodeEntity(l.Entity)
	if err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return Item{Kind: KindEntity, Entity: e}, nil
}

func decodeEntity(l *entityLine) (*odata.Entity, error) {
	if l.PK == nil || l.RK == nil || l.Props == nil {
		return nil, errors.New(`an entity needs "pk", "rk" and "props"`)
	}
	e := &odata.Entity{}
	var err error
	if e.PartitionKey, err = decodeString(l.PK); err != nil {
		return nil, fmt.Errorf("pk: %w", err)
	}
	if e.RowKey, err = decodeString(l.RK); err != nil {
		return nil, fmt.Errorf("rk: %w", err)
	}
	if l.TS != "" {
		ts, ok := odata.ParseDateTime(l.TS)
		if !ok {
			return nil, fmt.Errorf("ts: bad DateTime %q", l.TS)
		}
		e.Timestamp = ts
	}
	e.Properties = make([]odata.Property, 0, len(l.Props))
	for i, raw := range l.Props {
		p, err := decodeProperty(raw)
		if err != nil {
			return nil, fmt.Errorf("property %d: %w", i, err)
		}
		e.Properties = append(e.Properties, p)
	}
	if err := odata.ValidateEntity(e); err != nil {
		return nil, fmt.Errorf("entity (%q, %q): %w", e.PartitionKey, e.RowKey, err)
	}
	return e, nil
}

// decodeString reads a JSON string or {"bytes": base64}.
func decodeString(raw json.RawMessage) (string, error) {
	if len(raw) > 0 && raw[0] == '{' {
		var b struct {
			Bytes *string `json:"bytes"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil || b.Bytes == nil {
			return "", errors.New(`want a string or {"bytes": "<base64>"}`)
		}
		v, err := base64.StdEncoding.DecodeString(*b.Bytes)
		if err != nil {
			return "", fmt.Errorf("bytes: %w", err)
		}
		if utf8.Valid(v) {
			return "", errors.New(`{"bytes"} holds valid UTF-8, which is written as a string`)
		}
		return string(v), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errors.New(`want a string or {"bytes": "<base64>"}`)
	}
	return s, nil
}

func decodeProperty(raw json.RawMessage) (odata.Property, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) != 3 {
		return odata.Property{}, errors.New("want [name, type, value]")
	}
	var p odata.Property
	var typeName string
	if err := json.Unmarshal(parts[0], &p.Name); err != nil {
		return p, errors.New("the name is not a string")
	}
	if err := json.Unmarshal(parts[1], &typeName); err != nil {
		return p, fmt.Errorf("%s: the type is not a string", p.Name)
	}
	t, ok := odata.ParseTypeName(typeName)
	if !ok {
		return p, fmt.Errorf("%s: unknown type %q", p.Name, typeName)
	}
	v, err := decodeValue(t, parts[2])
	if err != nil {
		return p, fmt.Errorf("%s (%s): %w", p.Name, typeName, err)
	}
	p.Value = v
	return p, nil
}

func decodeValue(t odata.Type, raw json.RawMessage) (odata.Value, error) {
	if t == odata.TypeString {
		s, err := decodeString(raw)
		return odata.StringValue(s), err
	}
	if t == odata.TypeInt32 {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil || n < math.MinInt32 || n > math.MaxInt32 || !isInteger(raw) {
			return odata.Value{}, fmt.Errorf("want an integer in the Int32 range, got %s", raw)
		}
		return odata.Int32Value(int32(n)), nil
	}
	if t == odata.TypeBoolean {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return odata.Value{}, fmt.Errorf("want true or false, got %s", raw)
		}
		return odata.BoolValue(b), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return odata.Value{}, fmt.Errorf("want a string, got %s", raw)
	}
	switch t {
	case odata.TypeInt64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != s {
			return odata.Value{}, fmt.Errorf("bad Int64 %q", s)
		}
		return odata.Int64Value(n), nil
	case odata.TypeDouble:
		switch s {
		case "NaN":
			return odata.DoubleValue(math.NaN()), nil
		case "Infinity":
			return odata.DoubleValue(math.Inf(1)), nil
		case "-Infinity":
			return odata.DoubleValue(math.Inf(-1)), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return odata.Value{}, fmt.Errorf("bad Double %q", s)
		}
		return odata.DoubleValue(f), nil
	case odata.TypeDateTime:
		d, ok := odata.ParseDateTime(s)
		if !ok {
			return odata.Value{}, fmt.Errorf("bad DateTime %q", s)
		}
		return odata.DateTimeValue(d), nil
	case odata.TypeGuid:
		g, ok := odata.ParseGuid(s)
		if !ok {
			return odata.Value{}, fmt.Errorf("bad Guid %q", s)
		}
		return odata.GuidValue(g), nil
	case odata.TypeBinary:
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return odata.Value{}, fmt.Errorf("bad base64: %w", err)
		}
		return odata.BinaryValue(b), nil
	}
	return odata.Value{}, fmt.Errorf("type %v", t)
}

// isInteger reports whether a JSON number has no fraction or exponent.
func isInteger(raw json.RawMessage) bool {
	return !bytes.ContainsAny(raw, ".eE")
}

// Reader reads an export file line by line and checks its structure: the
// header first, entities only inside a table, a table's entities in
// strictly increasing (PartitionKey, RowKey) order (so each once, and
// each partition contiguous), the end line last with the right counts,
// nothing after it. A file that ends before the end line is truncated.
type Reader struct {
	r                *bufio.Reader
	line             int
	offset, nextOff  int64
	buf              []byte
	state            Kind // the kind of the last line read; 0 before any
	tables, entities int64
	lastPK, lastRK   string
	hasLast          bool
	err              error
}

// NewReader returns a Reader of the export file r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 256<<10)}
}

// Line returns the number of the line Next last returned (from 1), and
// the byte offset at which it starts.
func (r *Reader) Line() (int, int64) { return r.line, r.offset }

// Next returns the next line's item. After the end line it returns
// io.EOF. Every other error is a *LineError, and sticky.
func (r *Reader) Next() (Item, error) {
	if r.err != nil {
		return Item{}, r.err
	}
	it, err := r.next()
	if err != nil {
		r.err = err
	}
	return it, err
}

func (r *Reader) fail(column int, format string, args ...any) error {
	return &LineError{Line: r.line, Offset: r.offset, Column: column, Err: fmt.Errorf(format, args...)}
}

func (r *Reader) next() (Item, error) {
	b, err := r.readLine()
	if err == io.EOF {
		if r.state == KindEnd {
			return Item{}, io.EOF
		}
		r.line++
		r.offset = r.nextOff
		return Item{}, r.fail(0, "%w: the file ends without its end line (truncated?)", ErrMalformed)
	} else if err != nil {
		return Item{}, err
	}
	if r.state == KindEnd {
		return Item{}, r.fail(0, "%w: text after the end line", ErrMalformed)
	}
	it, err := DecodeLine(b)
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Item{}, r.fail(int(se.Offset), "%w", err)
		}
		return Item{}, r.fail(0, "%w", err)
	}
	switch it.Kind {
	case KindHeader:
		if r.state != 0 {
			return Item{}, r.fail(0, "%w: a second header", ErrMalformed)
		}
	case KindTable:
		if r.state == 0 {
			return Item{}, r.fail(0, "%w: the first line must be the header", ErrMalformed)
		}
		r.tables++
		r.hasLast = false
	case KindEntity:
		if r.state != KindTable && r.state != KindEntity {
			return Item{}, r.fail(0, "%w: an entity outside any table", ErrMalformed)
		}
		e := it.Entity
		if r.hasLast && (e.PartitionKey < r.lastPK || e.PartitionKey == r.lastPK && e.RowKey <= r.lastRK) {
			return Item{}, r.fail(0, "%w: entity (%q, %q) does not follow (%q, %q): a table's entities must be in strictly increasing (PartitionKey, RowKey) order", ErrMalformed, e.PartitionKey, e.RowKey, r.lastPK, r.lastRK)
		}
		r.lastPK, r.lastRK, r.hasLast = e.PartitionKey, e.RowKey, true
		r.entities++
	case KindEnd:
		if r.state == 0 {
			return Item{}, r.fail(0, "%w: the first line must be the header", ErrMalformed)
		}
		if it.Tables != r.tables || it.Entities != r.entities {
			return Item{}, r.fail(0, "%w: the end line counts %d tables and %d entities, the file holds %d and %d", ErrMalformed, it.Tables, it.Entities, r.tables, r.entities)
		}
	}
	r.state = it.Kind
	return it, nil
}

// readLine returns the next line without its newline; a last line without
// one is a truncated file.
func (r *Reader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	start := r.nextOff
	for {
		chunk, err := r.r.ReadSlice('\n')
		r.buf = append(r.buf, chunk...)
		if len(r.buf) > MaxLineBytes {
			r.line++
			r.offset = start
			return nil, r.fail(0, "%w: a line longer than %d bytes", ErrMalformed, MaxLineBytes)
		}
		if err == nil {
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			if len(r.buf) == 0 {
				return nil, io.EOF
			}
			r.line++
			r.offset = start
			return nil, r.fail(len(r.buf), "%w: the last line has no newline (truncated?)", ErrMalformed)
		}
		return nil, fmt.Errorf("export: read: %w", err)
	}
	r.line++
	r.offset = start
	r.nextOff = start + int64(len(r.buf))
	return r.buf[:len(r.buf)-1], nil
}
