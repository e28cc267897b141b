package azurite

import (
	"errors"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/odata"
)

// SampleFile is a small database in the emulator's layout (the shape of a
// file written by azurite 3.35.0, trimmed): one table with one entity of
// every type, the Guid stored as the emulator stores it (base64 of its
// text).
const SampleFile = `{"filename":"/x/__azurite_db_table__.json","collections":[
{"name":"$TABLES_COLLECTION$","data":[{"account":"devstoreaccount1","table":"Edges","meta":{"revision":0,"created":1,"version":0},"$loki":1}],"idIndex":null,"binaryIndices":{}},
{"name":"$SERVICES_COLLECTION$","data":[],"idIndex":null},
{"name":"devstoreaccount1$Edges","data":[{"PartitionKey":"p","RowKey":"r","properties":{"PartitionKey":"p","RowKey":"r",
"B":"AAEC/w==","B@odata.type":"Edm.Binary","D":1.5,"D@odata.type":"Edm.Double","DInf":"Infinity","DInf@odata.type":"Edm.Double",
"DT":"2024-01-02T03:04:05.1234567Z","DT@odata.type":"Edm.DateTime","G":"MDEyMzQ1NjctODlhYi1jZGVmLTAxMjMtNDU2Nzg5YWJjZGVm","G@odata.type":"Edm.Guid",
"I32":5,"I64":"9223372036854775807","I64@odata.type":"Edm.Int64","S":"h\u00e9llo","T":true,
"Timestamp":"2026-11-25T14:58:44.1525101Z","Timestamp@odata.type":"Edm.DateTime"},
"lastModifiedTime":"2026-11-25T14:58:44.1525101Z","eTag":"W/\"x\"","meta":{"revision":0},"$loki":1}]}],
"databaseVersion":1.5,"engineVersion":1.5,"ENV":"NODEJS"}`

func TestReadSample(t *testing.T) {
	var items []Item
	if err := Read(strings.NewReader(SampleFile), func(it Item) error { items = append(items, it); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Kind != KindTable || items[0].Table != "Edges" || items[1].Kind != KindEntity || items[1].Account != "devstoreaccount1" {
		t.Fatalf("items %+v", items)
	}
	e := items[1].Entity
	g, _ := odata.ParseGuid("01234567-89ab-cdef-0123-456789abcdef")
	want := map[string]odata.Value{
		"B": odata.BinaryValue([]byte{0, 1, 2, 0xff}), "D": odata.DoubleValue(1.5), "I32": odata.Int32Value(5),
		"I64": odata.Int64Value(1<<63 - 1), "S": odata.StringValue("héllo"), "T": odata.BoolValue(true), "G": odata.GuidValue(g),
	}
	for name, v := range want {
		if got, ok := e.Get(name); !ok || !got.Identical(v) {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	if len(e.Properties) != 9 || e.Timestamp == 0 {
		t.Fatalf("entity %+v", e)
	}
	if items[1].Offset <= 0 || !strings.HasPrefix(SampleFile[items[1].Offset:], `{"PartitionKey":"p"`) && !strings.HasPrefix(SampleFile[items[1].Offset:], `[{"PartitionKey"`) {
		t.Errorf("entity offset %d points at %q", items[1].Offset, SampleFile[items[1].Offset:min(len(SampleFile), int(items[1].Offset)+20)])
	}
}

func TestReadRefusals(t *testing.T) {
	for _, c := range []struct {
		name, file, want string
	}{
		{"truncated", SampleFile[:len(SampleFile)/2], "ends early"},
		{"not JSON", "hello", "invalid character"},
		{"no tables collection", `{"collections":[]}`, "no $TABLES_COLLECTION$"},
		{"not an object", `[]`, "expected"},
		{"unknown table", strings.Replace(SampleFile, `"table":"Edges"`, `"table":"Other"`, 1), "does not list"},
		{"bad value", strings.Replace(SampleFile, `"9223372036854775807"`, `"92233720368547758070"`, 1), "Edm.Int64"},
		{"trailing text", SampleFile + "x", "after the database"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Read(strings.NewReader(c.file), func(Item) error { return nil })
			var ae *Error
			if !errors.As(err, &ae) || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an Error containing %q", err, c.want)
			}
		})
	}
}
