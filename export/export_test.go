package export

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/internal/edmtest"
	"github.com/tabuladb/tabula/odata"
)

func TestRoundTripEdgeValues(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	ents := edmtest.EdgeEntities()
	if err := w.Table("acct", "Edges"); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := w.Entity(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Table("other", "Empty"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(buf.Bytes()))
	var got []*odata.Entity
	var tables []string
	for {
		it, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch it.Kind {
		case KindTable:
			tables = append(tables, it.Account+"/"+it.Table)
		case KindEntity:
			got = append(got, it.Entity)
		}
	}
	if strings.Join(tables, ",") != "acct/Edges,other/Empty" {
		t.Fatalf("tables %v", tables)
	}
	if len(got) != len(ents) {
		t.Fatalf("%d entities back, wrote %d", len(got), len(ents))
	}
	for i := range ents {
		if !edmtest.Same(got[i], ents[i]) {
			t.Fatalf("entity %d:\nwrote %+v\nread  %+v", i, ents[i], got[i])
		}
	}
	// Doubles are written as their shortest exact text, Int64 as strings.
	for _, want := range []string{`["I64Max","Edm.Int64","9223372036854775807"]`, `["NegZero","Edm.Double","-0"]`, `["NaN","Edm.Double","NaN"]`, `["Max","Edm.DateTime","9999-12-31T23:59:59.9999999Z"]`, `"rk":{"bytes":"/3Jhdw=="}`} {
		if !bytes.Contains(buf.Bytes(), []byte(want)) {
			t.Errorf("the file lacks %s", want)
		}
	}
}

// TestRefusals checks that damaged files are refused with the line, its
// offset and (for JSON syntax) the column.
func TestRefusals(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Table("a", "T")
	w.Entity(&odata.Entity{PartitionKey: "p", RowKey: "1", Properties: []odata.Property{{Name: "N", Value: odata.Int64Value(5)}}})
	w.Entity(&odata.Entity{PartitionKey: "p", RowKey: "2"})
	w.Close()
	good := buf.String()
	lines := strings.SplitAfter(good, "\n")
	// lines: header, table, entity 1, entity 2, end, "".
	offsetOf := func(n int) int64 { return int64(len(strings.Join(lines[:n-1], ""))) }
	for _, c := range []struct {
		name     string
		file     string
		line     int
		column   int
		contains string
	}{
		{"truncated mid-line", good[:len(good)-10], 5, 0, "no newline"},
		{"truncated at a line end", strings.Join(lines[:4], ""), 5, 0, "without its end line"},
		{"empty", "", 1, 0, "without its end line"},
		{"bad JSON", strings.Replace(good, `"rk":"2"`, `"rk":2"`, 1), 4, 27, "invalid character"},
		{"Int64 as a number", strings.Replace(good, `"Edm.Int64","5"`, `"Edm.Int64",5`, 1), 3, 0, "want a string"},
		{"Int32 out of range", strings.Replace(good, `"Edm.Int64","5"`, `"Edm.Int32",2147483648`, 1), 3, 0, "Int32 range"},
		{"unknown type", strings.Replace(good, `Edm.Int64`, `Edm.Decimal`, 1), 3, 0, "unknown type"},
		{"unknown field", strings.Replace(good, `"rk":"2"`, `"rk":"2","x":1`, 1), 4, 0, "unknown field"},
		{"out of order", strings.Replace(good, `"rk":"2"`, `"rk":"0"`, 1), 4, 0, "does not follow"},
		{"wrong count", strings.Replace(good, `"entities":2`, `"entities":3`, 1), 5, 0, "counts"},
		{"after the end", good + lines[2], 6, 0, "after the end"},
		{"no header", strings.Join(lines[1:], ""), 1, 0, "first line must be the header"},
		{"newer version", strings.Replace(good, `"version":1`, `"version":2`, 1), 1, 0, "version 2"},
		{"entity outside a table", lines[0] + lines[2] + lines[4], 2, 0, "outside any table"},
		{"bad key", strings.Replace(good, `"rk":"2"`, `"rk":"a/b"`, 1), 4, 0, "RowKey"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(c.file))
			var err error
			for err == nil {
				_, err = r.Next()
			}
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("got %v, want a LineError", err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if le.Line != c.line || le.Offset != offsetOf(min(c.line, len(lines))) && c.line <= len(lines) || (c.column > 0 && le.Column != c.column) || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("got %v (line %d offset %d column %d), want line %d offset %d column %d containing %q",
					err, le.Line, le.Offset, le.Column, c.line, offsetOf(min(c.line, len(lines))), c.column, c.contains)
			}
		})
	}
}
