package http1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestClient drives the server with net/http's client: concurrent
// keep-alive requests with bodies, each answered with its own body.
func TestClient(t *testing.T) {
	addr, _ := serve(t, echo, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				payload := strings.Repeat(fmt.Sprint(g), i*97)
				resp, err := client.Post("http://"+addr+fmt.Sprintf("/g%d/%d", g, i), "text/plain", strings.NewReader(payload))
				if err != nil {
					errs <- err
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := fmt.Sprintf("POST /g%d/%d HTTP/1.1 host=%s len=%d body=%q", g, i, addr, len(payload), payload)
				if err != nil || string(body) != want {
					errs <- fmt.Errorf("got %.80s (%v), want %.80s", body, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestShutdown: Shutdown closes idle connections at once, waits for a
// request in flight, which completes, and makes Serve return.
func TestShutdown(t *testing.T) {
	baseline := runtime.NumGoroutine()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	s := New(Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	})})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	idle := dial(t, addr)
	idle.send("GET /first HTTP/1.1\r\nHost: h\r\n\r\n")
	idle.response("GET")
	busy := dial(t, addr)
	busy.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Error("Shutdown left an idle connection open")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the listener still accepts after Shutdown")
	}
	close(release)
	if resp, body := busy.response("GET"); body != "done /slow" || !resp.Close {
		t.Errorf("in-flight request: %q close %v", body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	idle.Close()
	busy.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		t.Errorf("%d goroutines left, %d before", n, baseline)
	}
}

// TestShutdownDeadline: a request that outlives Shutdown's context makes
// it return the context's error; Close then ends the request's context
// and its connection.
func TestShutdownDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered, cancelled := make(chan struct{}), make(chan struct{})
	s := New(Options{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
		close(cancelled)
	})})
	go s.Serve(ln)
	c := dial(t, ln.Addr().String())
	c.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v", err)
	}
	s.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not cancel the request's context")
	}
	if !c.closed() {
		t.Error("Close left the connection open")
	}
}

// BenchmarkServe compares this package with net/http's server on the
// same handler, over loopback keep-alive connections. Only the ratio of
// the two means anything: the client's cost is in both.
func BenchmarkServe(b *testing.B) {
	entity := strings.Repeat("e", 300)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd["X-Ms-Request-Id"] = []string{"00000000-0000-4000-8000-000000000000"}
		hd["X-Ms-Version"] = []string{"2019-02-02"}
		hd["Content-Type"] = []string{"application/json;odata=minimalmetadata"}
		hd["Content-Length"] = []string{fmt.Sprint(len(entity))}
		io.WriteString(w, entity)
	})
	for _, impl := range []string{"net-http", "http1"} {
		b.Run(impl, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			if impl == "http1" {
				s := New(Options{Handler: h})
				go s.Serve(ln)
				defer s.Close()
			} else {
				s := &http.Server{Handler: h}
				go s.Serve(ln)
				defer s.Close()
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			defer client.CloseIdleConnections()
			url := "http://" + ln.Addr().String() + "/devstoreaccount1/t(PartitionKey='p',RowKey='r')"
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
