package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/vfs"
)

// TestStorageFailureUnderTheServer fails the WAL's fsync under a running
// server: the write that hit it is answered 500 InternalError with the
// service's error body, and is not visible; every later write is refused
// the same way, the failure being sticky; reads go on; and a power loss
// then keeps every write acknowledged before the failure and nothing
// after.
func TestStorageFailureUnderTheServer(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem, 1)
	store, err := partition.Open("/data", &partition.Options{LSM: lsm.Options{FS: efs}})
	if err != nil {
		t.Fatal(err)
	}
	logs := newLogCapture()
	ts := serveStore(t, store, &server.Options{Logger: slog.New(logs)})
	c := &http.Client{}
	do := func(method, path, body string, header ...string) (*http.Response, []byte) {
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		return send(t, c, rawRequest(t, ts, method, path, b, true, header...))
	}
	if resp, body := do("POST", "/Tables", `{"TableName":"disk"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create table: %d %s", resp.StatusCode, body)
	}
	for _, rk := range []string{"a", "b"} {
		if resp, body := do("POST", "/disk", `{"PartitionKey":"p","RowKey":"`+rk+`","V":1}`); resp.StatusCode != http.StatusCreated {
			t.Fatalf("insert %s: %d %s", rk, resp.StatusCode, body)
		}
	}

	efs.Inject(vfs.Fault{Op: vfs.OpSync, Match: ".log", Sticky: true})
	ts.storageFailed = true
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/disk", `{"PartitionKey":"p","RowKey":"c","V":1}`},
		{"PUT", "/disk(PartitionKey='p',RowKey='a')", `{"V":2}`},
		{"DELETE", "/disk(PartitionKey='p',RowKey='b')", ""},
		{"POST", "/Tables", `{"TableName":"other"}`},
	} {
		header := []string{}
		if w.method == "DELETE" {
			header = []string{"If-Match", "*"}
		}
		resp, body := do(w.method, w.path, w.body, header...)
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("x-ms-error-code") != "InternalError" ||
			!strings.Contains(string(body), `"code":"InternalError"`) || strings.Contains(string(body), "EIO") {
			t.Errorf("%s %s on a failed disk: %d %s %s", w.method, w.path, resp.StatusCode, resp.Header.Get("x-ms-error-code"), body)
		}
	}
	if n, _ := efs.Injected(); n == 0 {
		t.Fatal("no fault fired: the writes never reached the WAL's fsync")
	}
	logs.waitFor(t, "internal error", time.Second) // the cause is logged, not sent

	// Reads still work, and see nothing of the refused writes.
	resp, body := do("GET", "/disk()", "", "Accept", "application/json;odata=nometadata")
	var feed struct {
		Value []struct {
			RowKey string
			V      int
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &feed) != nil ||
		fmt.Sprint(feed.Value) != "[{a 1} {b 1}]" {
		t.Errorf("query after the failure: %d %s", resp.StatusCode, body)
	}
	resp, body = do("GET", "/disk(PartitionKey='p',RowKey='c')", "")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the refused insert is visible: %d %s", resp.StatusCode, body)
	}

	// Power fails now: what was acknowledged is there, the rest is not.
	clone := mem.CrashClone(nil)
	again, err := partition.Open("/data", &partition.Options{LSM: lsm.Options{FS: clone}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	ctx := context.Background()
	page, _, err := again.QueryEntitiesPage(ctx, auth.DevAccountName, "disk", partition.EntityQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page {
		got = append(got, e.RowKey)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("after the power loss the table holds %v, want the acknowledged a,b", got)
	}
	if _, err := again.GetTable(ctx, auth.DevAccountName, "other"); err == nil {
		t.Error("the refused table creation survived")
	}
}
