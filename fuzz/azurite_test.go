package fuzz

import (
	"bytes"
	"testing"

	"github.com/tabuladb/tabula/azurite"
	"github.com/tabuladb/tabula/odata"
)

// azuriteSample is a database in the Azurite emulator's layout (trimmed
// from a file azurite 3.35.0 wrote): a table, and an entity of every type.
const azuriteSample = `{"filename":"/x/__azurite_db_table__.json","collections":[
{"name":"$TABLES_COLLECTION$","data":[{"account":"devstoreaccount1","table":"Edges","meta":{"revision":0},"$loki":1}],"idIndex":null},
{"name":"$SERVICES_COLLECTION$","data":[]},
{"name":"devstoreaccount1$Edges","data":[{"PartitionKey":"p","RowKey":"r","properties":{"PartitionKey":"p","RowKey":"r",
"B":"AAEC/w==","B@odata.type":"Edm.Binary","D":1.5,"D@odata.type":"Edm.Double","N":"NaN","N@odata.type":"Edm.Double",
"DT":"2024-01-02T03:04:05.1234567Z","DT@odata.type":"Edm.DateTime","G":"MDEyMzQ1NjctODlhYi1jZGVmLTAxMjMtNDU2Nzg5YWJjZGVm","G@odata.type":"Edm.Guid",
"I32":5,"I64":"9223372036854775807","I64@odata.type":"Edm.Int64","S":"h\u00e9llo","T":true,"Timestamp":"2026-11-25T14:58:44.1525101Z"},
"eTag":"W/\"x\"","$loki":1}]}],"databaseVersion":1.5}`

// FuzzAzuriteFile feeds arbitrary bytes to the reader of the emulator's
// table database (docs/azurite-import.md): it must report tables and
// entities or an error, never panic or hang, and every entity it reports
// must pass the service's validation.
func FuzzAzuriteFile(f *testing.F) {
	f.Add([]byte(azuriteSample))
	f.Add([]byte(azuriteSample[:len(azuriteSample)/2]))
	f.Add([]byte(`{"collections":[{"name":"$TABLES_COLLECTION$","data":[]}]}`))
	f.Add([]byte(`{"collections":[{"data":[],"name":"a$b"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		azurite.Read(bytes.NewReader(data), func(it azurite.Item) error {
			n++
			if it.Kind == azurite.KindEntity {
				if err := odata.ValidateEntity(it.Entity); err != nil {
					t.Fatalf("an entity that fails validation: %v", err)
				}
			}
			if n > 100000 {
				t.Fatal("too many items from a small input")
			}
			return nil
		})
	})
}
