package fuzz

import (
	"bytes"
	"io"
	"testing"

	"github.com/tabuladb/tabula/export"
	"github.com/tabuladb/tabula/odata"
)

// FuzzExportLine feeds arbitrary bytes to the export format's line decoder
// (docs/export.md) and to its file reader: they must return an item or an
// error, never panic; an entity line they accept must encode again into a
// line that decodes to an identical entity (every value bit for bit).
func FuzzExportLine(f *testing.F) {
	for _, s := range []string{
		`{"format":"tabula-export","version":1}`,
		`{"table":{"account":"devstoreaccount1","name":"T"}}`,
		`{"entity":{"pk":"p","rk":{"bytes":"/w=="},"ts":"2024-01-02T03:04:05.1234567Z","props":[["A","Edm.Int64","-9223372036854775808"],["B","Edm.Double","NaN"],["C","Edm.Binary","AAE="],["D","Edm.Guid","01234567-89ab-cdef-0123-456789abcdef"],["E","Edm.DateTime","1601-01-01T00:00:00.0000000Z"],["F","Edm.Boolean",true],["G","Edm.Int32",-2147483648],["H","Edm.String",{"bytes":"gA=="}],["I","Edm.Double","-0"]]}}`,
		`{"end":{"tables":1,"entities":1}}`,
		`{"entity":{"pk":"p","rk":"r","props":[["A","Edm.Int32",1.5]]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The whole input as a file, too: structure checks and truncation.
		r := export.NewReader(bytes.NewReader(data))
		for i := 0; i < 1000; i++ {
			if _, err := r.Next(); err != nil {
				if err != io.EOF {
					_ = err.Error()
				}
				break
			}
		}
		it, err := export.DecodeLine(data)
		if err != nil || it.Kind != export.KindEntity {
			return
		}
		again, err := export.DecodeLine(export.AppendEntityLine(nil, it.Entity))
		if err != nil {
			t.Fatalf("re-encoded entity does not decode: %v", err)
		}
		a, b := it.Entity, again.Entity
		if a.PartitionKey != b.PartitionKey || a.RowKey != b.RowKey || a.Timestamp != b.Timestamp || len(a.Properties) != len(b.Properties) {
			t.Fatalf("round trip changed the entity: %+v -> %+v", a, b)
		}
		for i := range a.Properties {
			if a.Properties[i].Name != b.Properties[i].Name || !a.Properties[i].Value.Identical(b.Properties[i].Value) {
				t.Fatalf("round trip changed property %d: %v -> %v", i, a.Properties[i], b.Properties[i])
			}
		}
		_ = odata.ValidateEntity(b)
	})
}
