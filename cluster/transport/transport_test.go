package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/internal/syncbuf"
)

var testSecret = []byte("correct horse battery staple")

// recorder collects what a transport delivers.
type recorder struct {
	mu     sync.Mutex
	frames map[uint64]int       // Deliver calls per sender
	got    map[uint64][]Message // messages per sender, in delivery order
	block  chan struct{}        // if set, Deliver waits for it to close
}

func newRecorder() *recorder {
	return &recorder{frames: map[uint64]int{}, got: map[uint64][]Message{}}
}

func (r *recorder) deliver(from uint64, msgs []Message) {
	r.mu.Lock()
	block := r.block
	r.mu.Unlock()
	if block != nil {
		<-block
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames[from]++
	r.got[from] = append(r.got[from], msgs...)
}

func (r *recorder) count(from uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[from])
}

func (r *recorder) nframes(from uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frames[from]
}

func (r *recorder) indexes(from uint64) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ix []uint64
	for _, m := range r.got[from] {
		ix = append(ix, m.Raft.GetIndex())
	}
	return ix
}

// node is a transport served on its own loopback h2c server.
type node struct {
	id   uint64
	tr   *Transport
	rec  *recorder
	addr string
	srv  *http.Server
	done chan struct{} // closed when srv.Serve returns
	hits func()        // if set, called on every request to the server
}

type nodeOpt func(*Options, *tuning)

// serverTimeout is the test servers' ReadTimeout and WriteTimeout.
var serverTimeout = time.Second

func testTuning() tuning {
	tu := defaultTuning()
	tu.minBackoff = 10 * time.Millisecond
	tu.maxBackoff = 100 * time.Millisecond
	tu.connectTimeout = 2 * time.Second
	tu.writeTimeout = 5 * time.Second
	return tu
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func startNode(t testing.TB, id uint64, opts ...nodeOpt) *node {
	t.Helper()
	n := &node{id: id, rec: newRecorder()}
	o := Options{NodeID: id, Secret: testSecret, Deliver: n.rec.deliver, Logger: testLogger(t), QueueMessages: 1 << 20}
	tu := testTuning()
	for _, f := range opts {
		f(&o, &tu)
	}
	n.tr = newTransport(o, tu)
	n.serve(t, "127.0.0.1:0")
	return n
}

func (n *node) serve(t testing.TB, addr string) {
	t.Helper()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the port of a closed server may linger
	}
	if err != nil {
		t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle(StreamPath, n.tr.Handler())
	h := http.Handler(mux)
	if n.hits != nil {
		hits := n.hits
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits(); mux.ServeHTTP(w, r) })
	}
	n.srv = &http.Server{Handler: h, ReadTimeout: serverTimeout, WriteTimeout: serverTimeout, IdleTimeout: time.Minute}
	ConfigureServer(n.srv)
	n.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		srv.Serve(ln)
	}(n.srv, n.done)
}

func (n *node) stopServer() {
	n.srv.Close()
	<-n.done
}

func (n *node) close() {
	n.tr.Close()
	n.stopServer()
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkInOrder checks that ix is first..last with no gap.
func checkInOrder(t testing.TB, what string, ix []uint64, first, last uint64) {
	t.Helper()
	if uint64(len(ix)) != last-first+1 {
		t.Fatalf("%s: %d messages delivered, want %d", what, len(ix), last-first+1)
	}
	for i, x := range ix {
		if x != first+uint64(i) {
			t.Fatalf("%s: message %d has index %d, want %d (out of order or lost)", what, i, x, first+uint64(i))
		}
	}
}

// checkGoroutines waits for the number of goroutines to settle back to
// base, and fails with their stacks if it does not.
func checkGoroutines(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), base, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sendRange sends messages from..to with indexes first..last in batches.
func sendRange(tr *Transport, from, to, first, last uint64, batch int) {
	var b []Message
	for i := first; i <= last; i++ {
		b = append(b, msg(from, to, i))
		if len(b) == batch || i == last {
			tr.Send(b)
			b = nil
		}
	}
}

func TestTwoNodesExchangeInOrder(t *testing.T) {
	base := runtime.NumGoroutine()
	a, b := startNode(t, 1), startNode(t, 2)
	serving := runtime.NumGoroutine() // the servers, no connection yet
	a.tr.SetPeer(2, b.addr)
	b.tr.SetPeer(1, a.addr)
	const n = 5000
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sendRange(a.tr, 1, 2, 1, n, 7) }()
	go func() { defer wg.Done(); sendRange(b.tr, 2, 1, 1, n, 13) }()
	wg.Wait()
	waitFor(t, 10*time.Second, "every message", func() bool { return a.rec.count(2) >= n && b.rec.count(1) >= n })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, n)
	checkInOrder(t, "2->1", a.rec.indexes(2), 1, n)
	// Content arrives intact.
	for _, m := range b.rec.got[1][:50] {
		if want := msg(1, 2, m.Raft.GetIndex()); m.Group != want.Group || !proto.Equal(m.Raft, want.Raft) {
			t.Fatalf("delivered %v, sent %v", m, want)
		}
	}
	if u := a.tr.Unreachable(); u != nil {
		t.Fatalf("Unreachable() = %v on a healthy stream", u)
	}
	// Closing the transports closes their connections: the servers'
	// goroutines for them end too.
	a.tr.Close()
	b.tr.Close()
	checkGoroutines(t, serving)
	a.stopServer()
	b.stopServer()
	checkGoroutines(t, base)
}

func TestThreeNodesAllPairs(t *testing.T) {
	base := runtime.NumGoroutine()
	nodes := []*node{startNode(t, 1), startNode(t, 2), startNode(t, 3)}
	for _, x := range nodes {
		for _, y := range nodes {
			x.tr.SetPeer(y.id, y.addr) // its own id is ignored
		}
	}
	const n = 2000
	var wg sync.WaitGroup
	for _, x := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Interleave the peers in each Send, as a raft Ready does.
			for i := uint64(1); i <= n; i += 10 {
				var b []Message
				for j := i; j < i+10 && j <= n; j++ {
					for _, y := range nodes {
						if y != x {
							b = append(b, msg(x.id, y.id, j))
						}
					}
				}
				x.tr.Send(b)
			}
		}()
	}
	wg.Wait()
	for _, y := range nodes {
		for _, x := range nodes {
			if x == y {
				continue
			}
			waitFor(t, 10*time.Second, "every message", func() bool { return y.rec.count(x.id) >= n })
			checkInOrder(t, fmt.Sprintf("%d->%d", x.id, y.id), y.rec.indexes(x.id), 1, n)
		}
		if y.rec.count(y.id) != 0 {
			t.Fatalf("node %d delivered messages from itself", y.id)
		}
	}
	for _, x := range nodes {
		x.close()
	}
	checkGoroutines(t, base)
}

// TestBatching checks that everything queued before the writer wakes goes
// out in one frame.
func TestBatching(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	hooked := make(chan struct{})
	a := startNode(t, 1, func(o *Options, tu *tuning) {
		tu.beforeTake = func(uint64) {
			once.Do(func() { close(hooked); <-release })
		}
	})
	b := startNode(t, 2)
	defer a.close()
	defer b.close()
	a.tr.SetPeer(2, b.addr)
	a.tr.Send([]Message{msg(1, 2, 1)})
	<-hooked // the writer woke and is held before it takes the queue
	for i := uint64(2); i <= 100; i++ {
		a.tr.Send([]Message{msg(1, 2, i)})
	}
	close(release)
	waitFor(t, 5*time.Second, "100 messages", func() bool { return b.rec.count(1) >= 100 })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 100)
	if f := b.rec.nframes(1); f != 1 {
		t.Fatalf("100 messages queued before the writer woke arrived in %d frames, want 1", f)
	}
	// One Send of many messages is one frame too.
	sendRange(a.tr, 1, 2, 101, 1100, 1000)
	waitFor(t, 5*time.Second, "1100 messages", func() bool { return b.rec.count(1) >= 1100 })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 1100)
	if f := b.rec.nframes(1); f != 2 {
		t.Fatalf("one Send of 1000 messages arrived in %d frames, want 1", f-1)
	}
}

// TestSplitFrames checks that a batch larger than a frame is split, in
// order, and that a message larger than a frame is dropped alone.
func TestSplitFrames(t *testing.T) {
	a := startNode(t, 1, func(o *Options, tu *tuning) { tu.maxFrame = 4 << 10 })
	b := startNode(t, 2, func(o *Options, tu *tuning) { tu.maxFrame = 4 << 10 })
	defer a.close()
	defer b.close()
	a.tr.SetPeer(2, b.addr)
	var batch []Message
	for i := uint64(1); i <= 500; i++ {
		batch = append(batch, msg(1, 2, i))
		if i == 250 {
			big := msg(1, 2, 0)
			big.Raft.Context = make([]byte, 5<<10)
			batch = append(batch, big)
		}
	}
	a.tr.Send(batch)
	waitFor(t, 5*time.Second, "500 messages", func() bool { return b.rec.count(1) >= 500 })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 500)
	if f := b.rec.nframes(1); f < 5 {
		t.Fatalf("500 messages in %d frames of at most 4 KiB", f)
	}
}

// TestQueueBound checks that messages past the queue bound are dropped.
func TestQueueBound(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	hooked := make(chan struct{})
	a := startNode(t, 1, func(o *Options, tu *tuning) {
		o.QueueMessages = 10
		tu.beforeTake = func(uint64) { once.Do(func() { close(hooked); <-release }) }
	})
	b := startNode(t, 2)
	defer a.close()
	defer b.close()
	a.tr.SetPeer(2, b.addr)
	a.tr.Send([]Message{msg(1, 2, 1)})
	<-hooked
	sendRange(a.tr, 1, 2, 2, 100, 3)
	close(release)
	waitFor(t, 5*time.Second, "10 messages", func() bool { return b.rec.count(1) >= 10 })
	time.Sleep(100 * time.Millisecond)
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 10)
	// The queue takes messages again once drained.
	sendRange(a.tr, 1, 2, 101, 105, 5)
	waitFor(t, 5*time.Second, "15 messages", func() bool { return b.rec.count(1) >= 15 })
	if ix := b.rec.indexes(1); ix[10] != 101 || ix[14] != 105 {
		t.Fatalf("after draining: %v", ix[10:])
	}
}

func TestDefaultQueueBound(t *testing.T) {
	tr := New(Options{NodeID: 1, Secret: testSecret})
	defer tr.Close()
	if tr.qmax != DefaultQueueMessages || DefaultQueueMessages != 4096 {
		t.Fatalf("default queue bound %d", tr.qmax)
	}
}

func TestReconnectAfterRestart(t *testing.T) {
	base := runtime.NumGoroutine()
	a, b := startNode(t, 1), startNode(t, 2)
	a.tr.SetPeer(2, b.addr)
	sendRange(a.tr, 1, 2, 1, 100, 10)
	waitFor(t, 5*time.Second, "100 messages", func() bool { return b.rec.count(1) >= 100 })
	a.tr.Unreachable()

	b.stopServer()
	// The stream breaks; sending finds the peer unreachable.
	i := uint64(101)
	waitFor(t, 5*time.Second, "peer 2 reported unreachable", func() bool {
		a.tr.Send([]Message{msg(1, 2, i)})
		i++
		u := a.tr.Unreachable()
		return len(u) == 1 && u[0] == 2
	})

	b.serve(t, b.addr) // the same port
	// Messages flow again, in order, on the new stream.
	waitFor(t, 5*time.Second, "a message on the new stream", func() bool {
		a.tr.Send([]Message{msg(1, 2, i)})
		i++
		return b.rec.count(1) > 100
	})
	first := i
	sendRange(a.tr, 1, 2, first, first+999, 10)
	waitFor(t, 5*time.Second, "1000 messages after the restart", func() bool {
		ix := b.rec.indexes(1)
		return ix[len(ix)-1] == first+999
	})
	ix := b.rec.indexes(1)
	for k := 1; k < len(ix); k++ {
		if ix[k] <= ix[k-1] {
			t.Fatalf("out of order across the restart: %d after %d", ix[k], ix[k-1])
		}
	}
	var after []uint64
	for _, x := range ix {
		if x >= first {
			after = append(after, x)
		}
	}
	checkInOrder(t, "after the restart", after, first, first+999)
	a.close()
	b.close()
	checkGoroutines(t, base)
}

// TestSetPeerMoves checks that a changed address closes the stream and the
// next one goes to the new address, though the old one still answers.
func TestSetPeerMoves(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	b := startNode(t, 2)
	defer b.close()
	old := b.addr
	oldSrv, oldDone := b.srv, b.done
	defer func() { oldSrv.Close(); <-oldDone }()
	b.hits = func() { mu.Lock(); hits["new"]++; mu.Unlock() }
	b.serve(t, "127.0.0.1:0") // the same transport on a second server
	a := startNode(t, 1)
	defer a.close()
	a.tr.SetPeer(2, old)
	sendRange(a.tr, 1, 2, 1, 10, 10)
	waitFor(t, 5*time.Second, "10 messages", func() bool { return b.rec.count(1) >= 10 })
	a.tr.SetPeer(2, b.addr)
	waitFor(t, 5*time.Second, "a stream to the new address", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return hits["new"] > 0
	})
	sendRange(a.tr, 1, 2, 11, 20, 10)
	waitFor(t, 5*time.Second, "20 messages", func() bool { return b.rec.count(1) >= 20 })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 20)
}

// rawStream opens a stream to n with a plain h2c client, signed as from.
func rawStream(t *testing.T, n *node, from uint64, secret []byte, now time.Time, body io.Reader) (*http.Response, *http.Transport) {
	t.Helper()
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	rt := &http.Transport{Protocols: &protos}
	req, err := http.NewRequest(http.MethodPost, "http://"+n.addr+StreamPath, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(VersionHeader, StreamVersion)
	Sign(req, secret, "raft", from, n.id, now)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, rt
}

func TestRefused(t *testing.T) {
	b := startNode(t, 2)
	defer b.close()
	frame, _, _ := appendFrames(nil, []Message{msg(3, 2, 1)}, MaxFrame)
	for _, c := range []struct {
		name   string
		secret []byte
		from   uint64
		at     time.Time
		mutate func(req *http.Request)
		status int
		says   string
	}{
		{"wrong secret", []byte("another secret"), 3, time.Now(), nil, 401, "secret or the cluster does not match"},
		{"clock 6 minutes ahead", testSecret, 3, time.Now().Add(6 * time.Minute), nil, 401, "away from this node's clock"},
		{"clock 6 minutes behind", testSecret, 3, time.Now().Add(-6 * time.Minute), nil, 401, "away from this node's clock"},
		{"wrong receiver", testSecret, 3, time.Now(), func(req *http.Request) { Sign(req, testSecret, "raft", 3, 4, time.Now()) }, 401, "addressed to node 4"},
		{"signed for another purpose", testSecret, 3, time.Now(), func(req *http.Request) { Sign(req, testSecret, "forward", 3, 2, time.Now()) }, 401, "not signed with this node's cluster secret"},
		{"no signature", testSecret, 3, time.Now(), func(req *http.Request) { req.Header.Del(AuthHeader) }, 401, "no Tabula-Cluster-Auth header"},
		{"other version", testSecret, 3, time.Now(), func(req *http.Request) { req.Header.Set(VersionHeader, "1") }, 400, "version"},
		{"clock 4 minutes ahead", testSecret, 3, time.Now().Add(4 * time.Minute), nil, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var protos http.Protocols
			protos.SetUnencryptedHTTP2(true)
			rt := &http.Transport{Protocols: &protos}
			defer rt.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodPost, "http://"+b.addr+StreamPath, bytes.NewReader(frame))
			req.Header.Set(VersionHeader, StreamVersion)
			Sign(req, c.secret, "raft", c.from, 2, c.at)
			if c.mutate != nil {
				c.mutate(req)
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
				t.Fatalf("%s: %q, want %d saying %q", resp.Status, body, c.status, c.says)
			}
			want := 0
			if c.status == 200 {
				want = 1
			}
			if got := b.rec.count(3); got != want {
				t.Fatalf("%d messages delivered, want %d", got, want)
			}
			b.rec.mu.Lock()
			clear(b.rec.got)
			b.rec.mu.Unlock()
		})
	}
	// Over HTTP/1.1: 505.
	resp, err := http.Post("http://"+b.addr+StreamPath, streamContentType, bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusHTTPVersionNotSupported {
		t.Fatalf("HTTP/1.1: %s", resp.Status)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestTransportsRefuse checks refusals between transports: nothing is
// delivered and the sender reports the peer unreachable.
func TestTransportsRefuse(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  nodeOpt
	}{
		{"wrong secret", func(o *Options, _ *tuning) { o.Secret = []byte("not the cluster's") }},
		{"clock skew", func(o *Options, _ *tuning) { o.Now = func() time.Time { return time.Now().Add(-10 * time.Minute) } }},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			a, b := startNode(t, 1, c.opt), startNode(t, 2)
			a.tr.SetPeer(2, b.addr)
			sendRange(a.tr, 1, 2, 1, 10, 10)
			waitFor(t, 5*time.Second, "peer 2 reported unreachable", func() bool {
				u := a.tr.Unreachable()
				return len(u) == 1 && u[0] == 2
			})
			time.Sleep(100 * time.Millisecond)
			if n := b.rec.count(1); n != 0 {
				t.Fatalf("%d messages delivered", n)
			}
			a.close()
			b.close()
			checkGoroutines(t, base)
		})
	}
}

// TestMalformedFrame checks that a malformed frame closes its stream, with
// the reason in the response, and no other.
func TestMalformedFrame(t *testing.T) {
	a, b := startNode(t, 1), startNode(t, 2)
	defer a.close()
	defer b.close()
	a.tr.SetPeer(2, b.addr)
	sendRange(a.tr, 1, 2, 1, 10, 10)
	waitFor(t, 5*time.Second, "10 messages", func() bool { return b.rec.count(1) >= 10 })
	a.tr.Unreachable()

	good, _, _ := appendFrames(nil, []Message{msg(3, 2, 1)}, MaxFrame)
	be32 := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.BigEndian.AppendUint32(b, x)
		}
		return b
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	for _, c := range []struct {
		name  string
		bytes []byte
		says  string
	}{
		{"frame too large", be32(MaxFrame + 1), "a frame of 67108865 bytes"},
		{"too many messages", be32(8, 5, 0), "announces 5 messages"},
		{"message header past the frame", be32(12, 1, 0, 1), "announces 1 messages"},
		{"message past the frame", be32(16, 1, 0, 1, 100), "has 100 bytes"},
		{"not a message", cat(be32(20, 1, 0, 1, 4), []byte{0xff, 0xff, 0xff, 0xff}), "message 0 of 1"},
		{"bytes after the messages", cat(be32(8, 0, 7)), "4 bytes after"},
		{"no count", be32(2, 0), "has no count"},
		{"truncated", be32(100, 1), "ends inside a frame"},
		{"message from another node", func() []byte { f, _, _ := appendFrames(nil, []Message{msg(1, 2, 1)}, MaxFrame); return f }(), "is from 1 to 2 on the stream from 3"},
		{"message from another node's member", func() []byte {
			f, _, _ := appendFrames(nil, []Message{msg(ReplicaID(1, 3), 2, 1)}, MaxFrame)
			return f
		}(), "on the stream from 3"},
		{"message to another node's member", func() []byte {
			f, _, _ := appendFrames(nil, []Message{msg(3, ReplicaID(1, 2), 1)}, MaxFrame)
			return f
		}(), "on the stream from 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := cat(good, c.bytes) // the good frame first: delivered
			before := b.rec.count(3)
			resp, rt := rawStream(t, b, 3, testSecret, time.Now(), bytes.NewReader(body))
			defer rt.CloseIdleConnections()
			if resp.StatusCode != 200 {
				t.Fatalf("%s", resp.Status)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(got), c.says) || !strings.Contains(string(got), "malformed") {
				t.Fatalf("stream closed with %q, want it to say %q", got, c.says)
			}
			if n := b.rec.count(3) - before; n != 1 {
				t.Fatalf("%d messages delivered from the raw stream, want the good frame's 1", n)
			}
		})
	}
	// A valid raw stream that stays open is closed by the checks only when
	// malformed: an open pipe proves the stream is not closed for nothing.
	pr, pw := io.Pipe()
	resp, rt := rawStream(t, b, 3, testSecret, time.Now(), pr)
	defer rt.CloseIdleConnections()
	before := b.rec.count(3)
	pw.Write(good)
	waitFor(t, 5*time.Second, "the raw stream's frame", func() bool { return b.rec.count(3) > before })
	pw.Write([]byte{0, 0, 0})
	pw.Close() // ends inside a header
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), "ends inside a frame header") {
		t.Fatalf("got %q", got)
	}

	// The transports' own stream was not disturbed.
	sendRange(a.tr, 1, 2, 11, 20, 10)
	waitFor(t, 5*time.Second, "20 messages", func() bool { return b.rec.count(1) >= 20 })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 20)
	if u := a.tr.Unreachable(); u != nil {
		t.Fatalf("Unreachable() = %v: the good stream broke", u)
	}
}

// TestNewerStreamEndsOlder checks that a sender's new stream ends its old one.
func TestNewerStreamEndsOlder(t *testing.T) {
	b := startNode(t, 2)
	defer b.close()
	pr1, pw1 := io.Pipe()
	resp1, rt1 := rawStream(t, b, 3, testSecret, time.Now(), pr1)
	defer rt1.CloseIdleConnections()
	defer pw1.Close()
	pr2, pw2 := io.Pipe()
	resp2, rt2 := rawStream(t, b, 3, testSecret, time.Now(), pr2)
	defer rt2.CloseIdleConnections()
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, resp1.Body); close(ended) }()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the older stream is still open")
	}
	f, _, _ := appendFrames(nil, []Message{msg(3, 2, 7)}, MaxFrame)
	pw2.Write(f)
	waitFor(t, 5*time.Second, "a message on the newer stream", func() bool { return b.rec.count(3) == 1 })
	pw2.Close()
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	resp1.Body.Close()
}

// TestCloseStopsEverything checks that Close ends every goroutine: writers
// connected, in backoff and blocked on a peer that does not read, and
// inbound streams, and that Send and SetPeer after Close do nothing.
func TestCloseStopsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	// A write timeout longer than the test: Close alone unblocks the writer.
	a := startNode(t, 1, func(_ *Options, tu *tuning) { tu.writeTimeout = time.Hour })
	b, c := startNode(t, 2), startNode(t, 3)
	for _, x := range []*node{a, b, c} {
		for _, y := range []*node{a, b, c} {
			x.tr.SetPeer(y.id, y.addr)
		}
	}
	// Peer 4 does not exist: a's writer to it is in backoff.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	a.tr.SetPeer(4, dead)
	for _, x := range []*node{a, b, c} {
		for _, y := range []*node{a, b, c} {
			if x != y {
				sendRange(x.tr, x.id, y.id, 1, 100, 10)
			}
		}
	}
	a.tr.Send([]Message{msg(1, 4, 1)})
	waitFor(t, 5*time.Second, "the dead peer reported unreachable", func() bool {
		return slices.Contains(a.tr.Unreachable(), 4)
	})
	waitFor(t, 5*time.Second, "every message", func() bool {
		return b.rec.count(1) == 100 && c.rec.count(1) == 100 && a.rec.count(2) == 100 && a.rec.count(3) == 100
	})
	// c stops reading: a's writer to c blocks on flow control.
	block := make(chan struct{})
	c.rec.mu.Lock()
	c.rec.block = block
	c.rec.mu.Unlock()
	big := make([]Message, 0, 64)
	for i := range 64 {
		m := msg(1, 3, uint64(1000+i))
		m.Raft.Context = make([]byte, 256<<10)
		big = append(big, m)
	}
	a.tr.Send(big)
	time.Sleep(200 * time.Millisecond)

	closed := make(chan struct{})
	go func() { a.tr.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked")
	}
	a.tr.Send([]Message{msg(1, 2, 101)})
	a.tr.SetPeer(5, dead)
	a.tr.mu.Lock()
	if q := a.tr.peers[2].queue; len(q) != 0 || len(a.tr.peers) != 3 {
		t.Errorf("after Close, Send queued %d messages and SetPeer made %d peers of 3", len(q), len(a.tr.peers))
	}
	a.tr.mu.Unlock()
	if err := a.tr.Close(); err != nil {
		t.Fatal(err)
	}
	// A closed transport refuses streams.
	resp, rt := rawStream(t, a, 2, testSecret, time.Now(), bytes.NewReader(nil))
	resp.Body.Close()
	rt.CloseIdleConnections()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a closed transport answers %s", resp.Status)
	}
	close(block)
	a.stopServer()
	b.close()
	c.close()
	if n := b.rec.count(1); n != 100 {
		t.Fatalf("%d messages delivered, want 100: Send after Close sent", n)
	}
	checkGoroutines(t, base)
}

// TestOutlivesServerTimeouts checks that a stream lives past the server's
// ReadTimeout and WriteTimeout.
func TestOutlivesServerTimeouts(t *testing.T) {
	serverTimeout = 100 * time.Millisecond
	defer func() { serverTimeout = time.Second }()
	a, b := startNode(t, 1), startNode(t, 2)
	defer a.close()
	defer b.close()
	a.tr.SetPeer(2, b.addr)
	sendRange(a.tr, 1, 2, 1, 10, 10)
	waitFor(t, 5*time.Second, "10 messages", func() bool { return b.rec.count(1) >= 10 })
	a.tr.Unreachable()
	time.Sleep(400 * time.Millisecond)
	sendRange(a.tr, 1, 2, 11, 20, 10)
	waitFor(t, 5*time.Second, "20 messages", func() bool { return b.rec.count(1) >= 20 })
	checkInOrder(t, "1->2", b.rec.indexes(1), 1, 20)
	if u := a.tr.Unreachable(); u != nil {
		t.Fatalf("Unreachable() = %v: the stream broke at the server's timeout", u)
	}
}

// TestDialsAPeerAsSoonAsItIsHeard: a node waiting out a long backoff
// before it tries a down peer again opens its stream as soon as that
// peer's own stream arrives (it restarted), not a backoff later.
func TestDialsAPeerAsSoonAsItIsHeard(t *testing.T) {
	slow := func(_ *Options, tu *tuning) { tu.minBackoff, tu.maxBackoff = time.Minute, time.Minute }
	a, b := startNode(t, 1, slow), startNode(t, 2, slow)
	defer a.close()
	defer b.close()
	b.stopServer()
	a.tr.SetPeer(2, b.addr)
	a.tr.Send([]Message{msg(1, 2, 1)})
	waitFor(t, 5*time.Second, "peer 2 reported unreachable", func() bool {
		u := a.tr.Unreachable()
		return len(u) == 1 && u[0] == 2
	})
	// Node 2 comes back and talks to node 1 first.
	b.serve(t, b.addr)
	b.tr.SetPeer(1, a.addr)
	b.tr.Send([]Message{msg(2, 1, 1)})
	waitFor(t, 5*time.Second, "node 2's message at node 1", func() bool { return a.rec.count(2) == 1 })
	i := uint64(2)
	waitFor(t, 10*time.Second, "node 1's stream to node 2, well before its one-minute backoff", func() bool {
		a.tr.Send([]Message{msg(1, 2, i)})
		i++
		return b.rec.count(1) > 0
	})
}

// TestMembersTravelBetweenTheirNodes sends messages between members of a
// range group whose raft ids are not their nodes' ids (ReplicaID): each
// goes to the node its raft id names, and is delivered unchanged.
func TestMembersTravelBetweenTheirNodes(t *testing.T) {
	a, b := startNode(t, 1), startNode(t, 2)
	defer a.close()
	defer b.close()
	a.tr.SetPeer(2, b.addr)
	from, to := ReplicaID(1, 17), ReplicaID(2, 1<<31+5)
	if NodeOf(from) != 1 || NodeOf(to) != 2 || Incarnation(to) != 1<<31+5 || ReplicaID(2, 0) != 2 {
		t.Fatalf("ReplicaID/NodeOf do not invert: %x %x", from, to)
	}
	a.tr.Send([]Message{msg(from, to, 1), msg(1, 2, 2), msg(from, ReplicaID(2, 9), 3)})
	waitFor(t, 5*time.Second, "3 messages", func() bool { return b.rec.count(1) >= 3 })
	got := b.rec.got[1]
	if got[0].Raft.GetFrom() != from || got[0].Raft.GetTo() != to || got[2].Raft.GetTo() != ReplicaID(2, 9) {
		t.Fatalf("delivered %v", got)
	}
	if u := a.tr.Unreachable(); u != nil {
		t.Fatalf("Unreachable() = %v", u)
	}
}

// TestWriteTimeoutBreaksTheStream checks that a stream whose peer stops
// reading breaks once a write has waited the write timeout (the peer is
// reported unreachable), and that the messages sent once the peer reads
// again go on a new stream.
func TestWriteTimeoutBreaksTheStream(t *testing.T) {
	logged := &syncbuf.Buffer{}
	a := startNode(t, 1, func(o *Options, tu *tuning) {
		tu.writeTimeout = 300 * time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(logged, nil))
	})
	c := startNode(t, 3)
	defer a.close()
	defer c.close()
	a.tr.SetPeer(3, c.addr)
	a.tr.Send([]Message{msg(1, 3, 1)})
	waitFor(t, 5*time.Second, "the first message", func() bool { return c.rec.count(1) == 1 })

	block := make(chan struct{})
	c.rec.mu.Lock()
	c.rec.block = block
	c.rec.mu.Unlock()
	unblock := sync.OnceFunc(func() {
		c.rec.mu.Lock()
		c.rec.block = nil
		c.rec.mu.Unlock()
		close(block)
	})
	defer unblock() // before the closes, which wait for c's handler
	// c's handler reads the first frame whole and blocks delivering it;
	// the second is more than the stream's flow control lets a wait.
	for frame := range 2 {
		big := make([]Message, 0, 32)
		for i := range 32 {
			m := msg(1, 3, uint64(100+32*frame+i))
			m.Raft.Context = make([]byte, 256<<10)
			big = append(big, m)
		}
		a.tr.Send(big)
		time.Sleep(100 * time.Millisecond)
	}
	waitFor(t, 5*time.Second, "the stream broken by the write timeout", func() bool {
		return strings.Contains(logged.String(), errWriteTimeout.Error())
	})
	// Marked before the break is logged.
	if !slices.Contains(a.tr.Unreachable(), 3) {
		t.Fatal("the peer whose stream broke is not reported unreachable")
	}
	unblock()

	a.tr.Send([]Message{msg(1, 3, 1000)})
	waitFor(t, 5*time.Second, "the message sent after the break", func() bool {
		c.rec.mu.Lock()
		defer c.rec.mu.Unlock()
		return slices.ContainsFunc(c.rec.got[1], func(m Message) bool { return m.Raft.GetIndex() == 1000 })
	})
}
