package netproxy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// target is a TCP server for the proxy to forward to: it echoes each
// connection back to it, and on "sum" connections it reads to the end and
// then answers the SHA-256 of what it read.
type target struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs []net.Conn
}

func startTarget(t *testing.T, sum bool) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &target{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.cs = append(s.cs, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				if sum {
					h := sha256.New()
					io.Copy(h, c)
					c.Write(h.Sum(nil))
					return
				}
				io.Copy(c, c)
			}()
		}
	}()
	return s
}

func (s *target) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.cs {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func newProxy(t *testing.T, s *target) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip writes data and reads as many bytes back.
func roundTrip(c net.Conn, data []byte) ([]byte, error) {
	errc := make(chan error, 1)
	go func() { _, err := c.Write(data); errc <- err }()
	got := make([]byte, len(data))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadFull(c, got)
	if werr := <-errc; err == nil {
		err = werr
	}
	return got, err
}

func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPassThrough(t *testing.T) {
	base := runtime.NumGoroutine()
	echo, sum := startTarget(t, false), startTarget(t, true)
	pe, ps := newProxy(t, echo), newProxy(t, sum)

	// Both ways, intact, on several connections at once.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, pe)
			defer c.Close()
			data := make([]byte, 1<<20)
			rand.Read(data)
			got, err := roundTrip(c, data)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("echo through the proxy: %v, equal %v", err, bytes.Equal(got, data))
			}
		}()
	}
	wg.Wait()

	// The end of one way passes through (half-close) and the other way
	// still carries the answer.
	c := dial(t, ps)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	want := sha256.Sum256(data)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Fatalf("sum through the proxy: %x, %v; want %x", got, err, want)
	}
	c.Close()

	pe.Close()
	ps.Close()
	echo.close()
	sum.close()
	checkGoroutines(t, base)
}

// closedSoon reports whether reading c ends (EOF or reset) within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func TestCutAndHeal(t *testing.T) {
	base := runtime.NumGoroutine()
	echo := startTarget(t, false)
	p := newProxy(t, echo)

	c1, c2 := dial(t, p), dial(t, p)
	for _, c := range []net.Conn{c1, c2} {
		if got, err := roundTrip(c, []byte("before")); err != nil || string(got) != "before" {
			t.Fatalf("before the cut: %q, %v", got, err)
		}
	}
	p.Cut()
	for _, c := range []net.Conn{c1, c2} {
		if !closedSoon(c, 2*time.Second) {
			t.Fatal("an open connection survived the cut")
		}
		c.Close()
	}
	// New connections are accepted by the kernel, then closed at once,
	// without reaching the target.
	for range 3 {
		c := dial(t, p)
		c.Write([]byte("during"))
		if !closedSoon(c, 2*time.Second) {
			t.Fatal("a new connection got through the cut")
		}
		c.Close()
	}
	p.Heal()
	c3 := dial(t, p)
	if got, err := roundTrip(c3, []byte("after")); err != nil || string(got) != "after" {
		t.Fatalf("after healing: %q, %v", got, err)
	}
	if closedSoon(c3, 100*time.Millisecond) {
		t.Fatal("a connection after healing was closed")
	}
	c3.Close()
	p.Close()
	echo.close()
	checkGoroutines(t, base)
}

func TestDelay(t *testing.T) {
	echo := startTarget(t, false)
	defer echo.close()
	p := newProxy(t, echo)
	defer p.Close()
	c := dial(t, p)
	defer c.Close()
	rtt := func() time.Duration {
		start := time.Now()
		if got, err := roundTrip(c, []byte("x")); err != nil || string(got) != "x" {
			t.Fatalf("%q, %v", got, err)
		}
		return time.Since(start)
	}
	rtt()
	if d := rtt(); d > 50*time.Millisecond {
		t.Fatalf("round trip of %s without delay", d)
	}
	p.SetDelay(100 * time.Millisecond)
	if d := rtt(); d < 200*time.Millisecond {
		t.Fatalf("round trip of %s with 100ms each way", d)
	}
	// The delay is latency, not a pause per chunk: many chunks in flight
	// take about one delay, not one per chunk.
	start := time.Now()
	got, err := roundTrip(c, bytes.Repeat([]byte("y"), 8<<20))
	if err != nil || len(got) != 8<<20 {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second { // one pause per chunk would take 25s
		t.Fatalf("8 MiB took %s with a delay of 100ms each way", d)
	}
	p.SetDelay(0)
	if d := rtt(); d > 50*time.Millisecond {
		t.Fatalf("round trip of %s after removing the delay", d)
	}
}

func TestCloseNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	echo := startTarget(t, false)
	p := newProxy(t, echo)
	p.SetDelay(time.Hour) // connections held in a delay close too
	var cs []net.Conn
	for range 5 {
		c := dial(t, p)
		c.Write([]byte("held"))
		cs = append(cs, c)
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked")
	}
	for _, c := range cs {
		if !closedSoon(c, 2*time.Second) {
			t.Fatal("a connection survived Close")
		}
		c.Close()
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still listens after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	echo.close()
	checkGoroutines(t, base)
}
