package fuzz

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/odata"
)

// fuzzEntities are the fixed entities FuzzFilter evaluates every filter on.
func fuzzEntities() []*odata.Entity {
	ts, _ := odata.ParseDateTime("2024-01-02T03:04:05.1234567Z")
	g, _ := odata.ParseGuid("c9da6455-213d-42c9-9a79-3e9149a57833")
	return []*odata.Entity{
		{PartitionKey: "a", RowKey: "x", Timestamp: ts, Properties: []odata.Property{
			{Name: "Name", Value: odata.StringValue("hello")},
			{Name: "Age", Value: odata.Int32Value(42)},
			{Name: "Big", Value: odata.Int64Value(120)},
			{Name: "Score", Value: odata.DoubleValue(1.5)},
			{Name: "Active", Value: odata.BoolValue(true)},
			{Name: "When", Value: odata.DateTimeValue(ts)},
			{Name: "Id", Value: odata.GuidValue(g)},
			{Name: "Raw", Value: odata.BinaryValue([]byte{1, 2})},
		}},
		{PartitionKey: "b", RowKey: "", Timestamp: ts},
		{PartitionKey: "", RowKey: "y", Timestamp: ts + 1, Properties: []odata.Property{
			{Name: "Name", Value: odata.Int32Value(1)},
			{Name: "Active", Value: odata.BoolValue(false)},
		}},
	}
}

// FuzzFilter parses arbitrary $filter text. Whatever parses must compile,
// print as text that parses back to the same tree, and evaluate on fixed
// entities without panicking; the plan's ranges and residual together must
// select exactly the entities the whole filter selects.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		"", "PartitionKey eq 'a'", "PartitionKey eq 'a' and RowKey ge 'x' and RowKey lt 'y'",
		"not (Age gt 30) or Name eq 'it''s'", "Big ge 12L and Big lt 13L", "Active", "not Active",
		"When ge datetime'2024-01-01T00:00:00Z'", "Id eq guid'c9da6455-213d-42c9-9a79-3e9149a57833'",
		"Raw eq X'0102'", "Score lt 2.0 or Score eq NaN", "TableName ge 'a' and TableName lt 'b'",
		"(PartitionKey eq 'a' or PartitionKey eq 'b') and (RowKey eq 'x' or RowKey eq '')",
	} {
		f.Add(s)
	}
	entities := fuzzEntities()
	stored := make([][]byte, len(entities))
	for i, e := range entities {
		stored[i] = odata.EncodeEntity(e)
	}
	f.Fuzz(func(t *testing.T, text string) {
		flt, err := odata.ParseFilter(text)
		if err != nil {
			var oe *odata.Error
			if !errors.As(err, &oe) || oe.Code != odata.CodeInvalidInput || oe.Pos < 0 || oe.Pos > len(text) {
				t.Fatalf("parse error %v is not an InvalidInput *Error inside the text", err)
			}
			return
		}
		canon := flt.String()
		again, err := odata.ParseFilter(canon)
		if err != nil || again.String() != canon {
			t.Fatalf("canonical form %q does not reparse: %v, %v", canon, again, err)
		}
		plan, err := odata.CompileFilter(flt)
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		whole, err := odata.CompilePredicate(flt)
		if err != nil {
			t.Fatalf("compile predicate: %v", err)
		}
		for i, e := range entities {
			pk, rk := []byte(e.PartitionKey), []byte(e.RowKey)
			want, err := whole.Eval(pk, rk, stored[i])
			if err != nil {
				t.Fatal(err)
			}
			if mem := whole.EvalEntity(e); mem != want {
				t.Fatalf("%q: stored bytes say %v, in-memory entity says %v", text, want, mem)
			}
			in := false
			for _, r := range plan.Ranges {
				in = in || r.Contains(pk, rk)
			}
			got, err := plan.Match(pk, rk, stored[i])
			if err != nil {
				t.Fatal(err)
			}
			if (in && got) != want {
				t.Fatalf("%q on entity %d: plan (in ranges %v, residual %v) disagrees with the filter (%v)", text, i, in, got, want)
			}
		}
		tables, err := odata.CompileTableFilter(flt)
		if err != nil {
			t.Fatalf("compile tables: %v", err)
		}
		for _, name := range []string{"a", "abc", "b"} {
			tables.Match(name)
		}
	})
}

// FuzzEntityJSON decodes arbitrary request bodies. Every failure must be a
// service error; every success must survive encoding at minimal and full
// metadata and decoding again, and the stored binary form.
func FuzzEntityJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"PartitionKey":"p","RowKey":"r","A":1,"B":"x","C":true,"D":1.5}`,
		`{"A@odata.type":"Edm.Int64","A":"9223372036854775807","B":"NaN","B@odata.type":"Edm.Double"}`,
		`{"T@odata.type":"Edm.DateTime","T":"2024-01-02T03:04:05.1234567Z","G@odata.type":"Edm.Guid","G":"c9da6455-213d-42c9-9a79-3e9149a57833"}`,
		`{"X@odata.type":"Edm.Binary","X":"AAEC","E":"","N":null,"odata.etag":"x","Timestamp":"y"}`,
		`{"S":"\u00e9\ud83d\ude00\n","W":20.0,"Big":5000000000,"Neg":-0.0}`,
	} {
		f.Add([]byte(s))
	}
	encoders := []*odata.Encoder{
		odata.NewEncoder(odata.EncodeOptions{Metadata: odata.MinimalMetadata, BaseURL: "http://h/acct", Account: "acct", Table: "t"}),
		odata.NewEncoder(odata.EncodeOptions{Metadata: odata.FullMetadata, BaseURL: "http://h/acct", Account: "acct", Table: "t"}),
	}
	plain := odata.NewEncoder(odata.EncodeOptions{Metadata: odata.NoMetadata})
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := odata.DecodeEntityJSON(body)
		if err != nil {
			if odata.ErrorCode(err) == "" {
				t.Fatalf("error without a service code: %v", err)
			}
			return
		}
		if err := odata.ValidateEntity(&d.Entity); err != nil {
			t.Fatalf("decoded entity fails validation: %v", err)
		}
		stored := odata.EncodeEntity(&d.Entity)
		ts, props, err := odata.DecodeEncoded(stored)
		if err != nil || ts != d.Timestamp || !sameProperties(props, d.Properties) {
			t.Fatalf("binary round trip: %v", err)
		}
		pk, rk := []byte(d.PartitionKey), []byte(d.RowKey)
		for _, enc := range encoders {
			out, err := enc.AppendEntityResponse(nil, pk, rk, "", stored)
			if err != nil {
				t.Fatal(err)
			}
			back, err := odata.DecodeEntityJSON(out)
			if err != nil {
				t.Fatalf("re-decoding %s: %v", out, err)
			}
			if back.PartitionKey != d.PartitionKey || back.RowKey != d.RowKey || !sameProperties(back.Properties, d.Properties) {
				t.Fatalf("round trip through %s changed the entity:\n got %v\nwant %v", out, back.Properties, d.Properties)
			}
		}
		out, err := plain.AppendEntity(nil, pk, rk, "", stored)
		if err != nil || !json.Valid(out) {
			t.Fatalf("nometadata output %q: %v", out, err)
		}
	})
}

func sameProperties(a, b []odata.Property) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !a[i].Value.Identical(b[i].Value) {
			return false
		}
	}
	return true
}

// FuzzEntityBinary decodes arbitrary stored values: errors wrap
// base.ErrCorruption, never a panic; a value that decodes re-encodes to the
// same bytes, and the filter evaluator and JSON encoder survive any input.
func FuzzEntityBinary(f *testing.F) {
	ts, _ := odata.ParseDateTime("2024-01-02T03:04:05Z")
	for _, e := range fuzzEntities() {
		f.Add(odata.EncodeEntity(e))
	}
	f.Add(odata.AppendEncoded(nil, ts, nil))
	f.Add([]byte{})
	f.Add([]byte{1})
	plan, err := odata.PlanQuery("Name eq 'hello' or Raw gt X'00' or Timestamp gt datetime'2000-01-01T00:00:00Z' or Active")
	if err != nil {
		f.Fatal(err)
	}
	enc := odata.NewEncoder(odata.EncodeOptions{Metadata: odata.FullMetadata, Table: "t"})
	f.Fuzz(func(t *testing.T, data []byte) {
		plan.Match([]byte("a"), []byte("x"), data) //nolint:errcheck // only checking for panics
		out, jsonErr := enc.AppendEntity(nil, []byte("a"), []byte("x"), "", data)
		ts, props, err := odata.DecodeEncoded(data)
		if err != nil {
			if !errors.Is(err, base.ErrCorruption) {
				t.Fatalf("error does not wrap ErrCorruption: %v", err)
			}
			return
		}
		if jsonErr != nil || !json.Valid(out) {
			t.Fatalf("JSON encoding of a decodable value: %q, %v", out, jsonErr)
		}
		if again := odata.AppendEncoded(nil, ts, props); !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again, data)
		}
	})
}
