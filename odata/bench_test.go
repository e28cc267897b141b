package odata

import (
	"io"
	"testing"
)

// benchBody is a typical 10-property entity as an SDK sends it.
const benchBody = `{"PartitionKey":"customer-0042","RowKey":"order-000000123456",` +
	`"Name":"Jane Doe","Email":"jane@example.com","Age":42,"Balance":1234.5,` +
	`"Active":true,"Orders@odata.type":"Edm.Int64","Orders":"5454161346626",` +
	`"Since@odata.type":"Edm.DateTime","Since":"2019-05-17T10:20:30.1234567Z",` +
	`"Id@odata.type":"Edm.Guid","Id":"c9da6455-213d-42c9-9a79-3e9149a57833",` +
	`"City":"Zürich","Score":99.25}`

func benchStored(b *testing.B) (DecodedEntity, []byte) {
	d, err := DecodeEntityJSON([]byte(benchBody))
	if err != nil {
		b.Fatal(err)
	}
	return d, EncodeEntity(&d.Entity)
}

func BenchmarkDecodeEntityJSON(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := DecodeEntityJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeBinary(b *testing.B) {
	d, _ := benchStored(b)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEncoded(buf[:0], d.Timestamp, d.Properties)
	}
}

func BenchmarkEncodeJSONMinimal(b *testing.B) {
	d, stored := benchStored(b)
	enc := NewEncoder(EncodeOptions{Metadata: MinimalMetadata, BaseURL: "http://127.0.0.1:10002/devstoreaccount1/", Account: "devstoreaccount1", Table: "orders"})
	pk, rk := []byte(d.PartitionKey), []byte(d.RowKey)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = enc.AppendEntity(buf[:0], pk, rk, "", stored)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkEncodeJSONFull(b *testing.B) {
	d, stored := benchStored(b)
	enc := NewEncoder(EncodeOptions{Metadata: FullMetadata, BaseURL: "http://127.0.0.1:10002/devstoreaccount1/", Account: "devstoreaccount1", Table: "orders"})
	pk, rk := []byte(d.PartitionKey), []byte(d.RowKey)
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = enc.AppendEntity(buf[:0], pk, rk, "", stored)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkFeed1000(b *testing.B) {
	d, stored := benchStored(b)
	enc := NewEncoder(EncodeOptions{Metadata: MinimalMetadata, BaseURL: "http://127.0.0.1:10002/devstoreaccount1/", Account: "devstoreaccount1", Table: "orders"})
	pk, rk := []byte(d.PartitionKey), []byte(d.RowKey)
	b.ReportAllocs()
	for b.Loop() {
		f := enc.NewEntityFeed(io.Discard)
		for range 1000 {
			if err := f.WriteEntity(pk, rk, "", stored); err != nil {
				b.Fatal(err)
			}
		}
		f.Close()
	}
}

const benchFilter = "PartitionKey eq 'customer-0042' and RowKey ge 'order-0000' and RowKey lt 'order-9999' and " +
	"(Age gt 30 or Active eq false) and Since ge datetime'2019-01-01T00:00:00Z' and Orders lt 9000000000000L"

func BenchmarkParseFilter(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFilter(benchFilter); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileFilter(b *testing.B) {
	f, _ := ParseFilter(benchFilter)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileFilter(f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResidualEval(b *testing.B) {
	d, stored := benchStored(b)
	plan, err := PlanQuery(benchFilter)
	if err != nil {
		b.Fatal(err)
	}
	if plan.Residual == nil {
		b.Fatal("no residual")
	}
	pk, rk := []byte(d.PartitionKey), []byte(d.RowKey)
	b.ReportAllocs()
	for b.Loop() {
		ok, err := plan.Match(pk, rk, stored)
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkResidualEvalMissLastProperty(b *testing.B) {
	d, stored := benchStored(b)
	plan, _ := PlanQuery("Score gt 100.0")
	pk, rk := []byte(d.PartitionKey), []byte(d.RowKey)
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := plan.Match(pk, rk, stored); ok {
			b.Fatal("matched")
		}
	}
}
