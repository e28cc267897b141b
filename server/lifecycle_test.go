package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// logCapture is a slog.Handler that hands each record's message to a
// channel, for tests that wait on a log line instead of sleeping.
type logCapture struct{ records chan string }

func newLogCapture() *logCapture { return &logCapture{records: make(chan string, 1024)} }

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCapture) WithGroup(string) slog.Handler            { return l }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.records <- r.Message:
	default: // a test that stopped listening must not block the server
	}
	return nil
}

// waitFor waits for a record with message msg, up to d.
func (l *logCapture) waitFor(t *testing.T, msg string, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case got := <-l.records:
			if got == msg {
				return
			}
		case <-timeout:
			t.Fatalf("no %q log record in %v", msg, d)
		}
	}
}

// fillTable inserts n entities into a new table, a hundred per batch.
func fillTable(t *testing.T, store *partition.Store, table string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.CreateTable(ctx, auth.DevAccountName, table); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 100 {
		ops := make([]partition.Op, 0, 100)
		for j := i; j < min(i+100, n); j++ {
			ops = append(ops, partition.Op{Kind: partition.OpInsert, Entity: &odata.Entity{
				PartitionKey: fmt.Sprintf("p%03d", i/1000), RowKey: fmt.Sprintf("r%06d", j),
				Properties: []odata.Property{{Name: "N", Value: odata.Int32Value(int32(j))}},
			}})
		}
		if _, err := store.ExecuteBatch(ctx, auth.DevAccountName, table, ops); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDisconnectCancelsQuery starts a query that must read a whole table
// to fill its page, and hangs up once it runs: the scan stops at once
// instead of reading on for nobody.
//
// The store's clock, which a page consults every 32 keys, counts those
// looks and takes 2 ms each while armed, so reading the whole table takes
// 1,000 looks (two seconds); the count after the hang-up says how far the
// scan went on.
func TestDisconnectCancelsQuery(t *testing.T) {
	const entities = 32_000
	var armed atomic.Bool
	var looks atomic.Int64
	started := make(chan struct{}, 1)
	now := func() time.Time {
		if armed.Load() {
			looks.Add(1)
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(2 * time.Millisecond)
		}
		return time.Now()
	}
	store := openStore(t, &partition.Options{Now: now, PageTimeout: time.Hour})
	logs := newLogCapture()
	ts := serveStore(t, store, &server.Options{Logger: slog.New(logs)})
	fillTable(t, store, "scanned", entities)

	conn, err := net.Dial("tcp", ts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	// No entity has Missing: the page reads every key looking for one.
	io.WriteString(conn, signedHead(t, "GET", "/scanned()?$filter=Missing%20eq%201", "HTTP/1.1"))
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the query never started scanning")
	}
	conn.Close()
	logs.waitFor(t, "request cancelled", 30*time.Second)
	if n := looks.Load(); n > entities/32/2 {
		t.Fatalf("the scan went on after the client left: %d of %d clock looks", n, entities/32)
	} else {
		t.Logf("the scan stopped after %d of %d clock looks", n, entities/32)
	}
}

// TestShutdownWaitsForHandlers shuts a server down while a query runs
// past the grace period: Shutdown cancels it and returns only after its
// handler has, so the store is never closed under a running request.
func TestShutdownWaitsForHandlers(t *testing.T) {
	var armed atomic.Bool
	var inHandler atomic.Int64 // the query's clock looks under way
	started := make(chan struct{}, 1)
	now := func() time.Time {
		// Only the query's looks count: the store's background work
		// (range statistics) reads the same clock from its own goroutine.
		if armed.Load() && calledFrom("partition.(*page)") {
			inHandler.Add(1)
			defer inHandler.Add(-1)
			select {
			case started <- struct{}{}:
			default:
			}
			// Long looks: when Shutdown cancels the query, its handler is
			// almost surely inside one, still holding the store.
			time.Sleep(20 * time.Millisecond)
		}
		return time.Now()
	}
	store, err := partition.Open(t.TempDir(), &partition.Options{Now: now, PageTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(store, nil)
	if srv.Serving() {
		t.Fatal("Serving before Serve")
	}
	// Start registers the server before it returns: a readiness check
	// asked once the start message is out must not find it unready.
	served := srv.Start(ln)
	if !srv.Serving() {
		t.Fatal("not Serving once Start returned")
	}
	fillTable(t, store, "long", 32_000)

	armed.Store(true)
	answered := make(chan int, 1)
	go func() {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			answered <- -1
			return
		}
		defer conn.Close()
		io.WriteString(conn, signedHead(t, "GET", "/long()?$filter=Missing%20eq%201", "HTTP/1.1"))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- 0
			return
		}
		answered <- resp.StatusCode
	}()
	<-started
	if !srv.Serving() {
		t.Fatal("not Serving while a request runs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown reported the query finished inside its grace period")
	}
	if srv.Serving() {
		t.Fatal("Serving after Shutdown")
	}
	if n := inHandler.Load(); n != 0 {
		t.Fatalf("Shutdown returned with the handler still reading the store (%d clock looks under way)", n)
	}
	armed.Store(false)
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
	// The client was cut off: it got no page built from a closing store.
	if code := <-answered; code == http.StatusOK {
		t.Fatal("the cancelled query was answered 200")
	}
	// A second Shutdown (a signal handler and a deferred call, say)
	// returns at once instead of waiting for good.
	again := make(chan error, 1)
	go func() { again <- srv.Shutdown(context.Background()) }()
	select {
	case err := <-again:
		if err != nil {
			t.Fatalf("the second Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second Shutdown did not return")
	}
}

// TestShutdownBeforeServe: a Shutdown that comes before Serve has begun
// (a signal at start-up) makes Serve return at once rather than serve a
// store that is about to close.
func TestShutdownBeforeServe(t *testing.T) {
	store, err := partition.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := server.New(store, nil)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		if err != http.ErrServerClosed {
			t.Fatalf("Serve after Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve after Shutdown went on serving")
	}
	if conn, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		conn.Close()
		t.Fatal("the listener still accepts after Serve returned")
	}
}

// calledFrom reports whether a function whose name contains fn is on the
// caller's stack.
func calledFrom(fn string) bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}
