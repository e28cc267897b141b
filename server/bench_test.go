package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/vfs"
)

// The benchmarks drive a real server over loopback HTTP with a keep-alive
// client and Shared Key Lite, the cheapest signature to compute, so what
// they measure is mostly the server's path: routing, authentication,
// JSON, the store. Allocations include the client's.

// benchClient signs and sends requests to a test server.
type benchClient struct {
	ts     *testServer
	client *http.Client
}

func newBenchClient(b *testing.B) *benchClient {
	ts := startServer(b, nil)
	return &benchClient{ts: ts, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
}

// do sends method on path (below the account) with body and checks the
// status.
func (c *benchClient) do(b *testing.B, method, path, contentType string, body []byte, want int, header ...string) {
	req := rawRequest(b, c.ts, method, path, body, true, append([]string{"Content-Type", contentType}, header...)...)
	resp, data := send(b, c.client, req)
	if resp.StatusCode != want {
		b.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, data)
	}
}

func benchEntity(pk, rk string) []byte {
	return fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"Name":"entity %s","Count":42,"Big@odata.type":"Edm.Int64","Big":"1234567890123","Score":3.25,"Active":true}`, pk, rk, rk)
}

func fillPartition(b *testing.B, s *partition.Store, table, pk string, n int) {
	for start := 0; start < n; start += 100 {
		var ops []partition.Op
		for i := start; i < min(n, start+100); i++ {
			d, err := odata.DecodeEntityJSON(benchEntity(pk, fmt.Sprintf("r%06d", i)))
			if err != nil {
				b.Fatal(err)
			}
			ops = append(ops, partition.Op{Kind: partition.OpInsert, Entity: &d.Entity})
		}
		if _, err := s.ExecuteBatch(context.Background(), auth.DevAccountName, table, ops); err != nil {
			b.Fatal(err)
		}
	}
}

func createBenchTable(b *testing.B, c *benchClient, name string) {
	c.do(b, "POST", "/Tables", "application/json", []byte(`{"TableName":"`+name+`"}`), http.StatusNoContent, "Prefer", "return-no-content")
}

func BenchmarkHTTPGetEntity(b *testing.B) {
	c := newBenchClient(b)
	createBenchTable(b, c, "bench")
	fillPartition(b, c.ts.Store, "bench", "p", 1000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.do(b, "GET", fmt.Sprintf("/bench(PartitionKey='p',RowKey='r%06d')", i%1000), "", nil, http.StatusOK)
		i++
	}
}

func BenchmarkHTTPInsertEntity(b *testing.B) {
	c := newBenchClient(b)
	createBenchTable(b, c, "bench")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.do(b, "POST", "/bench", "application/json", benchEntity("p", fmt.Sprintf("r%09d", i)), http.StatusNoContent, "Prefer", "return-no-content")
		i++
	}
}

func BenchmarkHTTPBatch100(b *testing.B) {
	c := newBenchClient(b)
	createBenchTable(b, c, "bench")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var body strings.Builder
		body.WriteString("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n")
		for j := range 100 {
			fmt.Fprintf(&body, "--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"+
				"POST %s/bench HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nContent-Type: application/json\r\nPrefer: return-no-content\r\n\r\n%s\r\n",
				c.ts.ServiceURL, benchEntity(fmt.Sprint("p", i), fmt.Sprintf("r%03d", j)))
		}
		body.WriteString("--changeset_c--\r\n--batch_b--\r\n")
		c.do(b, "POST", "/$batch", "multipart/mixed; boundary=batch_b", []byte(body.String()), http.StatusAccepted)
		i++
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "entities/s")
}

func BenchmarkHTTPQueryPage1000(b *testing.B) {
	c := newBenchClient(b)
	createBenchTable(b, c, "bench")
	fillPartition(b, c.ts.Store, "bench", "p", 1000)
	b.ReportAllocs()
	for b.Loop() {
		c.do(b, "GET", "/bench()?$filter=PartitionKey%20eq%20'p'", "", nil, http.StatusOK)
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "entities/s")
}

// discardWriter is the least ResponseWriter: it keeps the header and
// drops the body, so a handler benchmark measures the handler alone.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// BenchmarkHandlerGetEntity runs the handler of a Shared Key signed point
// get without a connection: routing, authentication, the store read and
// the JSON response, and nothing of HTTP.
func BenchmarkHandlerGetEntity(b *testing.B) { benchHandlerGetEntity(b, nil) }

// BenchmarkHandlerGetEntityLogged is BenchmarkHandlerGetEntity with the
// access log, in JSON to nowhere: at info level, a record per request; at
// warn level, none (no request is slow), which should cost next to
// nothing.
func BenchmarkHandlerGetEntityLogged(b *testing.B) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		b.Run(level.String(), func(b *testing.B) {
			log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: level}))
			benchHandlerGetEntity(b, &server.Options{Observer: server.NewAccessLog(log, time.Second)})
		})
	}
}

func benchHandlerGetEntity(b *testing.B, opts *server.Options) {
	ts := startServer(b, opts)
	c := &benchClient{ts: ts, client: &http.Client{}}
	createBenchTable(b, c, "bench")
	fillPartition(b, ts.Store, "bench", "p", 1000)
	req := rawRequest(b, ts, "GET", "/bench(PartitionKey='p',RowKey='r000042')", nil, true)
	req.RequestURI = req.URL.RequestURI()
	b.ReportAllocs()
	for b.Loop() {
		w := &discardWriter{h: make(http.Header)}
		ts.Server.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkHandlerInsertEntity runs the handler of a Shared Key signed
// insert (Prefer: return-no-content, as the REST suite sends it) without a
// connection, on a store whose disk is memory (its fsync free): routing,
// authentication, the JSON entity, the store's write, the headers.
func BenchmarkHandlerInsertEntity(b *testing.B) {
	ts := serveStore(b, openStore(b, &partition.Options{LSM: lsm.Options{FS: vfs.NewMem()}}), nil)
	c := &benchClient{ts: ts, client: &http.Client{}}
	createBenchTable(b, c, "bench")
	body := []byte(`{"PartitionKey":"p0042","RowKey":"r000000","Name":"entity 42","N":42,"Score":3.5,"Active":true}`)
	req := rawRequest(b, ts, "POST", "/bench", body, true, "Prefer", "return-no-content")
	req.RequestURI = req.URL.RequestURI()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		copy(body[35:41], fmt.Sprintf("%06d", i%1000000))
		req.Body = io.NopCloser(bytes.NewReader(body))
		w := &discardWriter{h: make(http.Header)}
		ts.Server.ServeHTTP(w, req)
		if w.status != http.StatusNoContent {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkHandlerGetEntityEmulated is BenchmarkHandlerGetEntity on a
// server emulating limits, at rates it never reaches: what the emulation
// costs a request when it is on. Off, a server has no emulator at all.
func BenchmarkHandlerGetEntityEmulated(b *testing.B) {
	ts := startServer(b, &server.Options{Limits: &server.Limits{PartitionRate: 1e12, AccountRate: 1e12}})
	c := &benchClient{ts: ts, client: &http.Client{}}
	createBenchTable(b, c, "bench")
	fillPartition(b, ts.Store, "bench", "p", 1000)
	req := rawRequest(b, ts, "GET", "/bench(PartitionKey='p',RowKey='r000042')", nil, true)
	req.RequestURI = req.URL.RequestURI()
	b.ReportAllocs()
	for b.Loop() {
		w := &discardWriter{h: make(http.Header)}
		ts.Server.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}
