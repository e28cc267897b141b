package odata

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

var testOpts = EncodeOptions{
	BaseURL: "http://127.0.0.1:10002/devstoreaccount1",
	Account: "devstoreaccount1",
	Table:   "mytable",
}

func encodeAt(t *testing.T, m Metadata, sel *Selection, props []Property) []byte {
	t.Helper()
	opts := testOpts
	opts.Metadata, opts.Select = m, sel
	ts, _ := ParseDateTime("2021-04-06T21:03:31.9231271Z")
	out, err := NewEncoder(opts).AppendEntityResponse(nil, []byte("pk"), []byte("rk"), "", AppendEncoded(nil, ts, props))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("invalid JSON: %s", out)
	}
	return out
}

// TestJSONRoundTrip writes every type's edge values at each metadata level
// and reads them back: minimal and full metadata keep every type; without
// metadata a reader sees what JSON alone says.
func TestJSONRoundTrip(t *testing.T) {
	props := edgeProperties(t)
	for _, m := range []Metadata{MinimalMetadata, FullMetadata} {
		out := encodeAt(t, m, nil, props)
		d := mustDecode(t, string(out))
		if d.PartitionKey != "pk" || d.RowKey != "rk" || !sameProperties(d.Properties, props) {
			t.Errorf("%v: round trip differs:\n%s\n got %v\nwant %v", m, out, d.Properties, props)
		}
	}
	out := encodeAt(t, NoMetadata, nil, props)
	d := mustDecode(t, string(out))
	for i, p := range d.Properties {
		want := props[i].Value
		switch want.Type() {
		case TypeInt64, TypeDateTime, TypeGuid, TypeBinary:
			if p.Value.Type() != TypeString {
				t.Errorf("nometadata %s: %v, want a string", p.Name, p.Value)
			}
			continue
		case TypeDouble:
			if f := want.Double(); math.IsNaN(f) || math.IsInf(f, 0) {
				if p.Value.Type() != TypeString {
					t.Errorf("nometadata %s: %v, want a string", p.Name, p.Value)
				}
				continue
			}
		}
		if !p.Value.Identical(want) {
			t.Errorf("nometadata %s: %v, want %v", p.Name, p.Value, want)
		}
	}
}

func TestJSONGolden(t *testing.T) {
	d, _ := ParseDateTime("2024-01-02T03:04:05Z")
	g, _ := ParseGuid("c9da6455-213d-42c9-9a79-3e9149a57833")
	props := []Property{
		{"Name", StringValue("x")},
		{"Age", Int32Value(7)},
		{"Big", Int64Value(5454161346626)},
		{"Whole", DoubleValue(20)},
		{"Nan", DoubleValue(math.NaN())},
		{"When", DateTimeValue(d)},
		{"Id", GuidValue(g)},
		{"Raw", BinaryValue([]byte{1, 2, 3})},
		{"On", BoolValue(true)},
	}
	const etag = `"odata.etag":"W/\"datetime'2021-04-06T21%3A03%3A31.9231271Z'\""`
	const body = `"Name":"x","Age":7,"Big":"5454161346626","Whole":20.0,"Nan":"NaN","When":"2024-01-02T03:04:05Z","Id":"c9da6455-213d-42c9-9a79-3e9149a57833","Raw":"AQID","On":true`
	const annotated = `"Name":"x","Age":7,"Big@odata.type":"Edm.Int64","Big":"5454161346626","Whole":20.0,"Nan@odata.type":"Edm.Double","Nan":"NaN","When@odata.type":"Edm.DateTime","When":"2024-01-02T03:04:05Z","Id@odata.type":"Edm.Guid","Id":"c9da6455-213d-42c9-9a79-3e9149a57833","Raw@odata.type":"Edm.Binary","Raw":"AQID","On":true`
	for _, tc := range []struct {
		m    Metadata
		want string
	}{
		{NoMetadata, `{"PartitionKey":"pk","RowKey":"rk","Timestamp":"2021-04-06T21:03:31.9231271Z",` + body + `}`},
		{MinimalMetadata, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#mytable/@Element",` + etag +
			`,"PartitionKey":"pk","RowKey":"rk","Timestamp":"2021-04-06T21:03:31.9231271Z",` + annotated + `}`},
		{FullMetadata, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#mytable/@Element",` +
			`"odata.type":"devstoreaccount1.mytable",` +
			`"odata.id":"http://127.0.0.1:10002/devstoreaccount1/mytable(PartitionKey='pk',RowKey='rk')",` + etag +
			`,"odata.editLink":"mytable(PartitionKey='pk',RowKey='rk')",` +
			`"PartitionKey":"pk","RowKey":"rk","Timestamp@odata.type":"Edm.DateTime","Timestamp":"2021-04-06T21:03:31.9231271Z",` + annotated + `}`},
	} {
		if got := string(encodeAt(t, tc.m, nil, props)); got != tc.want {
			t.Errorf("%v:\n got %s\nwant %s", tc.m, got, tc.want)
		}
	}
	opts := testOpts
	opts.Metadata, opts.AnnotateWholeDoubles = MinimalMetadata, true
	out, _ := NewEncoder(opts).AppendEntity(nil, []byte("p"), []byte("r"), "E", AppendEncoded(nil, 0, props[3:4]))
	if !bytes.Contains(out, []byte(`"Whole@odata.type":"Edm.Double","Whole":20.0`)) || !bytes.Contains(out, []byte(`"odata.etag":"E"`)) {
		t.Errorf("AnnotateWholeDoubles / explicit etag: %s", out)
	}
}

func TestJSONKeyEscaping(t *testing.T) {
	opts := testOpts
	opts.Metadata = FullMetadata
	out, err := NewEncoder(opts).AppendEntity(nil, []byte("it's a \"pk\""), []byte("é%"), "", AppendEncoded(nil, 0, nil))
	if err != nil || !json.Valid(out) {
		t.Fatalf("%s %v", out, err)
	}
	want := `"odata.id":"http://127.0.0.1:10002/devstoreaccount1/mytable(PartitionKey='it''s%20a%20%22pk%22',RowKey='%C3%A9%25')"`
	if !bytes.Contains(out, []byte(want)) {
		t.Errorf("got %s\nwant it to contain %s", out, want)
	}
	// Invalid UTF-8 in a stored string still yields valid JSON.
	out, _ = NewEncoder(testOpts).AppendEntity(nil, []byte("\xff"), nil, "", AppendEncoded(nil, 0, []Property{{"S", StringValue("a\xc3")}}))
	if !json.Valid(out) {
		t.Errorf("invalid JSON for invalid UTF-8: %q", out)
	}
}

func TestJSONSelect(t *testing.T) {
	props := []Property{{"A", Int32Value(1)}, {"B", Int64Value(2)}, {"C", StringValue("c")}}
	sel, err := ParseSelect(" B , Missing,RowKey,B")
	if err != nil {
		t.Fatal(err)
	}
	got := string(encodeAt(t, MinimalMetadata, sel, props))
	want := `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#mytable/@Element",` +
		`"odata.etag":"W/\"datetime'2021-04-06T21%3A03%3A31.9231271Z'\"",` +
		`"RowKey":"rk","B@odata.type":"Edm.Int64","B":"2","Missing":null}`
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	sel, _ = ParseSelect("Timestamp")
	got = string(encodeAt(t, NoMetadata, sel, props))
	if got != `{"Timestamp":"2021-04-06T21:03:31.9231271Z"}` {
		t.Errorf("got %s", got)
	}
}

func TestFeeds(t *testing.T) {
	var buf bytes.Buffer
	opts := testOpts
	opts.Metadata = MinimalMetadata
	enc := NewEncoder(opts)
	f := enc.NewEntityFeed(&buf)
	stored := AppendEncoded(nil, 0, []Property{{"A", Int32Value(1)}})
	for i := range 3000 { // crosses the flush threshold several times
		if err := f.WriteEntity([]byte("p"), []byte(itoa(i)), "e", stored); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WriteEntity(nil, nil, "", []byte{9}); err == nil {
		t.Error("corrupt value accepted")
	}
	if err := f.WriteTable("x"); err == nil {
		t.Error("table written to an entity feed")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Metadata string           `json:"odata.metadata"`
		Value    []map[string]any `json:"value"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %.200s", err, buf.Bytes())
	}
	if doc.Metadata != "http://127.0.0.1:10002/devstoreaccount1/$metadata#mytable" || len(doc.Value) != 3000 || doc.Value[2999]["RowKey"] != "2999" {
		t.Errorf("feed: %q, %d entities", doc.Metadata, len(doc.Value))
	}
	if _, ok := doc.Value[0]["odata.metadata"]; ok {
		t.Error("feed element carries odata.metadata")
	}

	for _, tc := range []struct {
		m    Metadata
		want string
	}{
		{NoMetadata, `{"value":[{"TableName":"t1"},{"TableName":"t2"}]}`},
		{MinimalMetadata, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables","value":[{"TableName":"t1"},{"TableName":"t2"}]}`},
		{FullMetadata, `{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables","value":[` +
			`{"odata.type":"devstoreaccount1.Tables","odata.id":"http://127.0.0.1:10002/devstoreaccount1/Tables('t1')","odata.editLink":"Tables('t1')","TableName":"t1"},` +
			`{"odata.type":"devstoreaccount1.Tables","odata.id":"http://127.0.0.1:10002/devstoreaccount1/Tables('t2')","odata.editLink":"Tables('t2')","TableName":"t2"}]}`},
	} {
		buf.Reset()
		o := testOpts
		o.Metadata = tc.m
		f := NewEncoder(o).NewTableFeed(&buf)
		f.WriteTable("t1")
		f.WriteTable("t2")
		f.Close()
		if buf.String() != tc.want {
			t.Errorf("%v tables feed:\n got %s\nwant %s", tc.m, buf.String(), tc.want)
		}
	}
	o := testOpts
	o.Metadata = MinimalMetadata
	if got := string(NewEncoder(o).AppendTableResponse(nil, "t1")); got !=
		`{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#Tables/@Element","TableName":"t1"}` {
		t.Errorf("table response: %s", got)
	}
	buf.Reset()
	f = NewEncoder(o).NewEntityFeed(&buf)
	f.Close()
	if !strings.HasSuffix(buf.String(), `"value":[]}`) {
		t.Errorf("empty feed: %s", buf.String())
	}
}

// TestFeedBuffer: a feed built in a buffer is the same document as one
// streamed to a writer, appended after what the buffer held.
func TestFeedBuffer(t *testing.T) {
	opts := testOpts
	opts.Metadata = FullMetadata
	enc := NewEncoder(opts)
	var streamed bytes.Buffer
	stream := enc.NewEntityFeed(&streamed)
	built := enc.NewEntityFeedBuffer([]byte("kept"))
	for i := range 2000 { // past the streaming feed's flush threshold
		stored := AppendEncoded(nil, DateTime(i), []Property{{"A", Int32Value(int32(i))}})
		for _, f := range []*FeedWriter{stream, built} {
			if err := f.WriteEntity([]byte("p"), []byte(itoa(i)), "", stored); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream.Close()
	built.Close()
	got, ok := strings.CutPrefix(string(built.Bytes()), "kept")
	if !ok || got != streamed.String() || built.Len() != 2000 {
		t.Errorf("buffered feed (%d entities) differs from the streamed one: %.100s", built.Len(), built.Bytes())
	}
}

func TestAppendEntityValue(t *testing.T) {
	e := &Entity{PartitionKey: "p", RowKey: "r", Properties: []Property{{"A", Int64Value(1)}}}
	out := NewEncoder(EncodeOptions{Metadata: MinimalMetadata, Table: "t"}).AppendEntityValue(nil, e, "")
	d := mustDecode(t, string(out))
	if d.PartitionKey != "p" || !sameProperties(d.Properties, e.Properties) {
		t.Errorf("%s", out)
	}
}
