// Package azurite reads the table database of the Azurite emulator, the
// LokiJS JSON file __azurite_db_table__.json, so that tabula
// import-azurite can load every account's tables and entities. It streams
// the file: one entity is decoded at a time. docs/azurite-import.md
// describes what it reads.
package azurite

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tabuladb/tabula/odata"
)

// FileName is the name of the emulator's table database in its --location.
const FileName = "__azurite_db_table__.json"

// Collection names of the emulator's table metadata store.
const (
	tablesCollection   = "$TABLES_COLLECTION$"
	servicesCollection = "$SERVICES_COLLECTION$"
)

// ErrMalformed is wrapped by every error about a damaged file or one that
// is not an emulator table database.
var ErrMalformed = errors.New("not a readable Azurite table database")

// Error locates a problem: the byte offset in the file (of the entity,
// table record or token concerned) and, for an entity, its table.
type Error struct {
	Offset int64
	Where  string
	Err    error
}

func (e *Error) Error() string {
	if e.Where != "" {
		return fmt.Sprintf("byte offset %d (%s): %v", e.Offset, e.Where, e.Err)
	}
	return fmt.Sprintf("byte offset %d: %v", e.Offset, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Kind is what an Item is.
type Kind int

// The items Read reports.
const (
	KindTable  Kind = iota + 1 // a table (from the tables collection)
	KindEntity                 // an entity of the table named in Account, Table
)

// Item is a table or an entity found in the file.
type Item struct {
	Kind           Kind
	Account, Table string
	Entity         *odata.Entity // KindEntity; Timestamp as the emulator stored it
	Offset         int64         // where the record starts in the file
}

// Read streams the database in r and calls fn for every table and then,
// collection by collection, for every entity, in the file's order. fn's
// error stops Read and is returned as is. The file must be LokiJS's
// "normal" serialization, as the emulator writes it.
func Read(r io.Reader, fn func(Item) error) error {
	p := &parser{dec: json.NewDecoder(bufio.NewReaderSize(r, 1<<20)), fn: fn, tables: map[string]string{}}
	p.dec.UseNumber()
	err := p.file()
	var cbErr callbackError
	if errors.As(err, &cbErr) {
		return cbErr.err
	}
	return err
}

type callbackError struct{ err error }

func (c callbackError) Error() string { return c.err.Error() }

type parser struct {
	dec    *json.Decoder
	fn     func(Item) error
	tables map[string]string // "account$table" -> table name as created
	sawTab bool
}

func (p *parser) fail(where string, format string, args ...any) error {
	return &Error{Offset: p.dec.InputOffset(), Where: where, Err: fmt.Errorf(format+": %w", append(args, ErrMalformed)...)}
}

// jsonErr turns a decoder error into an Error at the current offset.
func (p *parser) jsonErr(where string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return p.fail(where, "the file ends early (truncated?)")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &Error{Offset: se.Offset, Where: where, Err: fmt.Errorf("%w: %w", ErrMalformed, err)}
	}
	return p.fail(where, "%v", err)
}

func (p *parser) delim(want json.Delim, where string) error {
	t, err := p.dec.Token()
	if err != nil {
		return p.jsonErr(where, err)
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return p.fail(where, "expected %q, found %v", want, t)
	}
	return nil
}

func (p *parser) key(where string) (string, error) {
	t, err := p.dec.Token()
	if err != nil {
		return "", p.jsonErr(where, err)
	}
	k, ok := t.(string)
	if !ok {
		return "", p.fail(where, "expected a member name, found %v", t)
	}
	return k, nil
}

func (p *parser) skip(where string) error {
	var v json.RawMessage
	if err := p.dec.Decode(&v); err != nil {
		return p.jsonErr(where, err)
	}
	return nil
}

func (p *parser) file() error {
	if err := p.delim('{', "the database object"); err != nil {
		return err
	}
	sawCollections := false
	for p.dec.More() {
		k, err := p.key("the database object")
		if err != nil {
			return err
		}
		if k != "collections" {
			if err := p.skip(k); err != nil {
				return err
			}
			continue
		}
		sawCollections = true
		if err := p.delim('[', "collections"); err != nil {
			return err
		}
		for p.dec.More() {
			if err := p.collection(); err != nil {
				return err
			}
		}
		if err := p.delim(']', "collections"); err != nil {
			return err
		}
	}
	if err := p.delim('}', "the database object"); err != nil {
		return err
	}
	if _, err := p.dec.Token(); err != io.EOF {
		return p.fail("", "text after the database object")
	}
	if !sawCollections {
		return p.fail("", "no collections: not a LokiJS database")
	}
	if !p.sawTab {
		return p.fail("", "no %s collection: not the emulator's table database", tablesCollection)
	}
	return nil
}

func (p *parser) collection() error {
	if err := p.delim('{', "a collection"); err != nil {
		return err
	}
	name := ""
	for p.dec.More() {
		k, err := p.key("a collection")
		if err != nil {
			return err
		}
		switch k {
		case "name":
			var s string
			if err := p.dec.Decode(&s); err != nil {
				return p.jsonErr("a collection's name", err)
			}
			name = s
		case "data":
			if name == "" {
				return p.fail("a collection", "its data comes before its name (not LokiJS's layout)")
			}
			if err := p.data(name); err != nil {
				return err
			}
		default:
			if err := p.skip("collection " + name); err != nil {
				return err
			}
		}
	}
	return p.delim('}', "collection "+name)
}

// tableRecord is a document of the tables collection.
type tableRecord struct {
	Account string `json:"account"`
	Table   string `json:"table"`
}

// entityRecord is a document of a table's collection.
type entityRecord struct {
	PartitionKey *string         `json:"PartitionKey"`
	RowKey       *string         `json:"RowKey"`
	Properties   json.RawMessage `json:"properties"`
}

func (p *parser) data(name string) error {
	where := "collection " + name
	if err := p.delim('[', where); err != nil {
		return err
	}
	account, table, isTable := "", "", false
	switch {
	case name == tablesCollection:
		p.sawTab = true
	case strings.HasPrefix(name, "$"):
		// The services collection (service properties) and any other
		// metadata: not tables.
	default:
		var ok bool
		table, ok = p.tables[name]
		if !ok {
			return p.fail(where, "a collection of entities for a table the tables collection does not list")
		}
		account, _, _ = strings.Cut(name, "$")
		isTable = true
	}
	for i := 0; p.dec.More(); i++ {
		off := p.dec.InputOffset()
		switch {
		case name == tablesCollection:
			var t tableRecord
			if err := p.dec.Decode(&t); err != nil {
				return p.jsonErr(where, err)
			}
			if t.Account == "" || t.Table == "" || strings.Contains(t.Account, "$") {
				return &Error{Offset: off, Where: where, Err: fmt.Errorf("table record %d lacks an account or a table: %w", i, ErrMalformed)}
			}
			p.tables[t.Account+"$"+t.Table] = t.Table
			if err := p.fn(Item{Kind: KindTable, Account: t.Account, Table: t.Table, Offset: off}); err != nil {
				return callbackError{err}
			}
		case isTable:
			var rec entityRecord
			if err := p.dec.Decode(&rec); err != nil {
				return p.jsonErr(where, err)
			}
			e, err := convertEntity(&rec)
			if err != nil {
				return &Error{Offset: off, Where: fmt.Sprintf("table %s/%s, entity %d", account, table, i), Err: fmt.Errorf("%w: %w", ErrMalformed, err)}
			}
			if err := p.fn(Item{Kind: KindEntity, Account: account, Table: table, Entity: e, Offset: off}); err != nil {
				return callbackError{err}
			}
		default:
			if err := p.skip(where); err != nil {
				return err
			}
		}
	}
	return p.delim(']', where)
}

// convertEntity turns a stored document into an entity. Its properties
// object is the entity as a request body gave it, with the emulator's
// annotations; it is decoded by the service's own rules
// (odata.DecodeEntityJSON), after undoing the one way the emulator stores
// a value differently: an Edm.Guid is kept as the base64 of its text.
func convertEntity(rec *entityRecord) (*odata.Entity, error) {
	if rec.PartitionKey == nil || rec.RowKey == nil || rec.Properties == nil {
		return nil, errors.New("an entity record needs PartitionKey, RowKey and properties")
	}
	props, err := fixGuids(rec.Properties)
	if err != nil {
		return nil, err
	}
	d, err := odata.DecodeEntityJSON(props)
	if err != nil {
		return nil, fmt.Errorf("entity (%q, %q): %w", *rec.PartitionKey, *rec.RowKey, err)
	}
	e := d.Entity
	// The record's keys are the ones the emulator indexes and serves.
	e.PartitionKey, e.RowKey = *rec.PartitionKey, *rec.RowKey
	if err := odata.ValidateEntity(&e); err != nil {
		return nil, fmt.Errorf("entity (%q, %q): %w", e.PartitionKey, e.RowKey, err)
	}
	if ts, ok := timestampOf(props); ok {
		e.Timestamp = ts
	}
	return &e, nil
}

// fixGuids rewrites, in an object's members (kept in order), each value
// annotated Edm.Guid that is not a GUID's text but the base64 of one.
func fixGuids(obj json.RawMessage) ([]byte, error) {
	var members []member
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("properties is not an object")
	}
	types := map[string]string{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("properties: %w", err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("properties: %w", err)
		}
		if name, ok := strings.CutSuffix(k, "@odata.type"); ok {
			var s string
			if json.Unmarshal(v, &s) == nil {
				types[name] = s
			}
		}
		members = append(members, member{k, v})
	}
	changed := false
	for i, m := range members {
		if types[m.key] != "Edm.Guid" {
			continue
		}
		var s string
		if json.Unmarshal(m.value, &s) != nil {
			continue
		}
		if _, ok := odata.ParseGuid(s); ok {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			if _, ok := odata.ParseGuid(string(b)); ok {
				members[i].value, _ = json.Marshal(string(b))
				changed = true
			}
		}
	}
	if !changed {
		return obj, nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type member struct {
	key   string
	value json.RawMessage
}

// timestampOf reads the emulator's Timestamp property, if any.
func timestampOf(props []byte) (odata.DateTime, bool) {
	var v struct {
		Timestamp string `json:"Timestamp"`
	}
	if json.Unmarshal(props, &v) != nil || v.Timestamp == "" {
		return 0, false
	}
	return odata.ParseDateTime(v.Timestamp)
}
