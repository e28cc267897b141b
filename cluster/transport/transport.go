// Package transport carries raft messages between the nodes of a cluster
// (docs/cluster.md, docs/transport.md).
//
// Each node keeps one long-lived HTTP/2 POST stream open to every peer it
// sends to, over cleartext HTTP/2 on the peers' internal addresses. One
// goroutine per peer writes everything queued for that peer since its last
// write as one frame, whatever the raft group of each message; the receiving
// node's Handler reads the frames and hands each frame's messages to
// Options.Deliver. Every stream is authenticated with an HMAC of the sender,
// the receiver and the time under the cluster secret (Sign, Verify).
//
// Delivery is best effort, as raft expects of its transport: messages queued
// past Options.QueueMessages, or written to a stream that breaks, are lost,
// and raft retransmits. Messages of one stream are delivered in the order
// they were sent.
package transport

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// StreamPath is where a node mounts Handler on its internal HTTP server.
const StreamPath = "/raft/stream"

// StreamVersion is the version of the stream's wire format, carried in the
// request's VersionHeader. A receiver refuses a stream of another version
// with 400.
const StreamVersion = "2"

// VersionHeader carries StreamVersion on a stream's request.
const VersionHeader = "Tabula-Raft-Stream-Version"

// streamContentType is the stream request's and response's Content-Type.
const streamContentType = "application/x-tabula-raft-stream"

// DefaultQueueMessages is the default Options.QueueMessages.
const DefaultQueueMessages = 4096

// Options configure a Transport.
type Options struct {
	// NodeID is this node's id (not 0).
	NodeID uint64
	// Secret is the cluster secret: it authenticates every stream and
	// forwarded request (not empty).
	Secret []byte
	// Deliver is called with the messages of one received frame, in
	// order, from one goroutine per peer stream. It must not block for
	// long: while it runs, that peer's stream is not read. Nil discards
	// what is received.
	Deliver func(from uint64, msgs []Message)
	// Logger receives the transport's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock that signs and verifies streams; nil is time.Now.
	Now func() time.Time
	// QueueMessages bounds each peer's outbound queue; past it, messages
	// are dropped (raft retransmits). 0 is DefaultQueueMessages.
	QueueMessages int
}

// tuning holds what tests change; New sets the defaults.
type tuning struct {
	minBackoff, maxBackoff time.Duration // between attempts to open a stream
	dialTimeout            time.Duration // to connect to a peer
	connectTimeout         time.Duration // to open a stream: connect and get the response header
	writeTimeout           time.Duration // to write one batch of frames to a stream
	pingAfter, pingTimeout time.Duration // HTTP/2 health check of an idle connection
	maxFrame               int
	// beforeTake, if set, is called by a peer's writer after it wakes and
	// before it takes the queue.
	beforeTake func(to uint64)
}

func defaultTuning() tuning {
	return tuning{
		minBackoff:     50 * time.Millisecond,
		maxBackoff:     2 * time.Second,
		dialTimeout:    3 * time.Second,
		connectTimeout: 5 * time.Second,
		writeTimeout:   10 * time.Second,
		pingAfter:      5 * time.Second,
		pingTimeout:    5 * time.Second,
		maxFrame:       MaxFrame,
	}
}

// Transport sends raft messages to the peers of a node and receives theirs.
type Transport struct {
	self    uint64
	secret  []byte
	deliver func(from uint64, msgs []Message)
	log     *slog.Logger
	now     func() time.Time
	qmax    int
	tune    tuning

	rt     *http.Transport
	client *http.Client
	dialer *net.Dialer
	conns  map[*trackedConn]struct{} // under mu: every connection rt dialed and has not closed

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	mu          sync.Mutex
	closed      bool
	peers       map[uint64]*peer
	unreachable map[uint64]struct{}
	unknown     map[uint64]bool     // peers without an address that Send was asked to reach (logged once)
	inbound     map[uint64]*inbound // the current stream from each sender

	wg   sync.WaitGroup // peer writers
	inWG sync.WaitGroup // inbound streams being served
}

// New returns a Transport for node opts.NodeID. It panics if NodeID is 0 or
// Secret is empty.
func New(opts Options) *Transport {
	return newTransport(opts, defaultTuning())
}

func newTransport(opts Options, tune tuning) *Transport {
	if opts.NodeID == 0 {
		panic("transport: Options.NodeID is 0")
	}
	if len(opts.Secret) == 0 {
		panic("transport: Options.Secret is empty")
	}
	t := &Transport{
		self:        opts.NodeID,
		secret:      slices.Clone(opts.Secret),
		deliver:     opts.Deliver,
		log:         opts.Logger,
		now:         opts.Now,
		qmax:        opts.QueueMessages,
		tune:        tune,
		peers:       make(map[uint64]*peer),
		unreachable: make(map[uint64]struct{}),
		unknown:     make(map[uint64]bool),
		inbound:     make(map[uint64]*inbound),
		conns:       make(map[*trackedConn]struct{}),
	}
	if t.deliver == nil {
		t.deliver = func(uint64, []Message) {}
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.log = t.log.With("node", t.self)
	if t.now == nil {
		t.now = time.Now
	}
	if t.qmax <= 0 {
		t.qmax = DefaultQueueMessages
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // http:// URLs: HTTP/2 with prior knowledge
	t.rt = &http.Transport{
		Protocols:   &protos,
		DialContext: t.dial,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: tune.pingAfter,
			PingTimeout:     tune.pingTimeout,
		},
	}
	t.dialer = &net.Dialer{Timeout: tune.dialTimeout, KeepAlive: 15 * time.Second}
	t.client = &http.Client{Transport: t.rt}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// ConfigureServer enables what the raft stream needs on the node's internal
// server: cleartext HTTP/2 (keeping HTTP/1 if the server had no Protocols
// set) and HTTP/2 health checks of idle connections. The stream itself
// lifts the server's read and write deadlines.
func ConfigureServer(s *http.Server) {
	if s.Protocols == nil {
		s.Protocols = new(http.Protocols)
		s.Protocols.SetHTTP1(true)
	}
	s.Protocols.SetUnencryptedHTTP2(true)
	if s.HTTP2 == nil {
		s.HTTP2 = new(http.HTTP2Config)
	}
	if s.HTTP2.SendPingTimeout == 0 {
		s.HTTP2.SendPingTimeout = 10 * time.Second
	}
	if s.HTTP2.PingTimeout == 0 {
		s.HTTP2.PingTimeout = 5 * time.Second
	}
}

// SetPeer adds or updates a peer's internal address (host:port). A changed
// address closes the peer's stream; the next one goes to the new address.
// The node's own id is ignored.
func (t *Transport) SetPeer(id uint64, addr string) {
	if id == 0 || id == t.self {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[id]; p != nil {
		p.setAddr(addr)
		return
	}
	p := newPeer(t, id, addr)
	t.peers[id] = p
	delete(t.unknown, id)
	t.wg.Add(1)
	go p.run()
}

// Send queues messages, each for the node of the raft id m.Raft.GetTo()
// (NodeOf), without blocking. The transport keeps the messages until they
// are written: the caller must not modify them. A message to a peer without an address, or
// past the peer's queue bound, is dropped.
func (t *Transport) Send(msgs []Message) {
	// Group the messages by peer, in order, resolving the peers under
	// t.mu; then queue each peer's group under that peer's lock at once,
	// so that the writer takes it whole: one Send's messages to a peer go
	// in one frame.
	type group struct {
		p    *peer
		msgs []Message
	}
	var groups []group
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	for i := 0; i < len(msgs); {
		to := NodeOf(msgs[i].Raft.GetTo())
		j := i + 1
		for j < len(msgs) && NodeOf(msgs[j].Raft.GetTo()) == to {
			j++
		}
		p := t.peers[to]
		switch k := slices.IndexFunc(groups, func(g group) bool { return g.p == p }); {
		case p == nil:
			if !t.unknown[to] {
				t.unknown[to] = true
				t.log.Warn("raft messages to a node without a known address are dropped", "to", to)
			}
		case k < 0:
			groups = append(groups, group{p, msgs[i:j:j]})
		default:
			groups[k].msgs = append(groups[k].msgs, msgs[i:j]...)
		}
		i = j
	}
	t.mu.Unlock()
	for _, g := range groups {
		g.p.enqueue(g.msgs)
		g.p.signal()
	}
}

// Unreachable reports the peers whose stream failed (could not be opened,
// was refused or broke) since the last call, in increasing order.
func (t *Transport) Unreachable() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.unreachable) == 0 {
		return nil
	}
	ids := make([]uint64, 0, len(t.unreachable))
	for id := range t.unreachable {
		ids = append(ids, id)
	}
	clear(t.unreachable)
	slices.Sort(ids)
	return ids
}

func (t *Transport) markUnreachable(id uint64) {
	t.mu.Lock()
	t.unreachable[id] = struct{}{}
	t.mu.Unlock()
}

// Close closes every stream, outbound and inbound, and stops every goroutine
// the transport started. It waits for calls to Deliver under way to return.
// After Close, Send and SetPeer do nothing and Handler answers 503.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	for _, in := range t.inbound {
		in.cancel()
	}
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	t.inWG.Wait()
	// A connection whose last stream was still being reset is not idle
	// yet: close every connection, not only the idle ones.
	t.rt.CloseIdleConnections()
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// trackedConn is a connection to a peer, known to its Transport until closed.
type trackedConn struct {
	net.Conn
	t    *Transport
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return err
}

// dial connects to a peer for rt, refusing once the transport is closed.
func (t *Transport) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := t.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: nc, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		nc.Close()
		return nil, errClosed
	}
	t.conns[c] = struct{}{}
	return c, nil
}
