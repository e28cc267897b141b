package server_test

import (
	"io"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
)

// TestRequestTable names the table whose entities a request addresses,
// as a cluster node routes it: from the path in either URL style, from a
// batch's first request line (the body read back whole afterwards), and
// none for the requests of tables, ACLs and the service.
func TestRequestTable(t *testing.T) {
	store, err := partition.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := server.New(store, nil)
	batchBody := "--batch_1\r\nContent-Type: multipart/mixed; boundary=changeset_1\r\n\r\n--changeset_1\r\n" +
		"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
		"POST http://127.0.0.1:10002/devstoreaccount1/Batched HTTP/1.1\r\nContent-Type: application/json\r\n\r\n" +
		`{"PartitionKey":"p","RowKey":"r"}` + strings.Repeat(" ", 8<<10) + "\r\n--changeset_1--\r\n--batch_1--\r\n"
	for _, c := range []struct {
		method, url, body string
		account, table    string
	}{
		{"GET", "http://127.0.0.1:10002/devstoreaccount1/People(PartitionKey='a',RowKey='b')", "", "devstoreaccount1", "People"},
		{"POST", "http://127.0.0.1:10002/devstoreaccount1/People", "{}", "devstoreaccount1", "People"},
		{"GET", "http://127.0.0.1:10002/devstoreaccount1/People()?$filter=x%20eq%201", "", "devstoreaccount1", "People"},
		{"GET", "http://devstoreaccount1.table.localhost:10002/People()", "", "devstoreaccount1", "People"},
		{"GET", "http://127.0.0.1:10002/devstoreaccount1/People?comp=acl", "", "devstoreaccount1", ""},
		{"POST", "http://127.0.0.1:10002/devstoreaccount1/Tables", "{}", "devstoreaccount1", ""},
		{"DELETE", "http://127.0.0.1:10002/devstoreaccount1/Tables('People')", "", "devstoreaccount1", ""},
		{"GET", "http://127.0.0.1:10002/devstoreaccount1/?restype=service&comp=properties", "", "devstoreaccount1", ""},
		{"POST", "http://127.0.0.1:10002/devstoreaccount1/$batch", batchBody, "devstoreaccount1", "Batched"},
		{"GET", "http://127.0.0.1:10002/devstoreaccount1/a/b/c", "", "devstoreaccount1", ""},
	} {
		r := httptest.NewRequest(c.method, c.url, strings.NewReader(c.body))
		account, table := s.RequestTable(r)
		if account != c.account || table != c.table {
			t.Errorf("%s %s: %q %q, want %q %q", c.method, c.url, account, table, c.account, c.table)
		}
		if rest, err := io.ReadAll(r.Body); err != nil || string(rest) != c.body {
			t.Errorf("%s %s: the body reads back as %d bytes (%v), want %d", c.method, c.url, len(rest), err, len(c.body))
		}
	}
}

// TestRequestPartitionKey names the first PartitionKey of requests of a
// table's entities, as a cluster routes a split table's: from the URL of
// a point operation, a query's continuation or $filter, an insert's body,
// a batch's first operation (its URL, or its body for an insert, past
// the 4 KiB a table is peeked in); the body always reads back whole.
func TestRequestPartitionKey(t *testing.T) {
	store, err := partition.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := server.New(store, nil)
	batchOf := func(line, body string) string {
		return "--batch_1\r\nContent-Type: multipart/mixed; boundary=changeset_1\r\n\r\n--changeset_1\r\n" +
			"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
			line + " HTTP/1.1\r\nContent-Type: application/json\r\n\r\n" + body + "\r\n--changeset_1--\r\n--batch_1--\r\n"
	}
	cont := partition.NewContinuation("next pk", "rk")
	base := "http://127.0.0.1:10002/devstoreaccount1/"
	for _, c := range []struct {
		method, url, body string
		pk                string
		ok                bool
	}{
		{"GET", base + "People(PartitionKey='a%20b',RowKey='c')", "", "a b", true},
		{"DELETE", base + "People(PartitionKey='x',RowKey='y')", "", "x", true},
		{"POST", base + "People", `{"RowKey":"r","PartitionKey":"from body","N":1}`, "from body", true},
		{"POST", base + "People", `{"RowKey":"r"}`, "", false},
		{"POST", base + "People", `not json`, "", false},
		{"GET", base + "People()?$filter=" + url.QueryEscape("PartitionKey ge 'm' and N gt 2"), "", "m", true},
		{"GET", base + "People()?$filter=" + url.QueryEscape("N gt 2"), "", "", true},
		{"GET", base + "People()?NextPartitionKey=" + cont.NextPartitionKey + "&NextRowKey=" + cont.NextRowKey, "", "next pk", true},
		{"GET", base + "People()?$filter=" + url.QueryEscape("PartitionKey eq"), "", "", false},
		{"POST", base + "$batch", batchOf("MERGE "+base+"People(PartitionKey='bp',RowKey='r')", `{}`), "bp", true},
		{"POST", base + "$batch", batchOf("POST "+base+"People", `{"PartitionKey":"ins"}`+strings.Repeat(" ", 8<<10)), "ins", true},
		{"POST", base + "$batch", "--garbage", "", false},
		{"GET", base + "Tables", "", "", false},
	} {
		r := httptest.NewRequest(c.method, c.url, strings.NewReader(c.body))
		if strings.Contains(c.url, "$batch") {
			r.Header.Set("Content-Type", "multipart/mixed; boundary=batch_1")
		}
		pk, ok := s.RequestPartitionKey(r)
		if pk != c.pk || ok != c.ok {
			t.Errorf("%s %s: %q, %v; want %q, %v", c.method, c.url, pk, ok, c.pk, c.ok)
		}
		if rest, err := io.ReadAll(r.Body); err != nil || string(rest) != c.body {
			t.Errorf("%s %s: the body reads back as %d bytes (%v), want %d", c.method, c.url, len(rest), err, len(c.body))
		}
	}
}
