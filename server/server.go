package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/internal/svcerr"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/storagexml"
)

// Store is the table service a Server answers for: a partition.Store, or
// a cluster node's replicated one. Its errors carry the service's codes
// (partition.ErrorCode).
type Store interface {
	CreateTable(ctx context.Context, account, name string) (partition.Table, error)
	DeleteTable(ctx context.Context, account, name string) error
	GetTable(ctx context.Context, account, name string) (partition.Table, error)
	QueryTables(ctx context.Context, account string, q partition.TableQuery) (partition.TablePage, error)
	Apply(ctx context.Context, account, table string, op partition.Op) (partition.StoredEntity, error)
	ExecuteBatch(ctx context.Context, account, table string, ops []partition.Op) ([]partition.StoredEntity, error)
	GetEntity(ctx context.Context, account, table, pk, rk string) (partition.StoredEntity, error)
	QueryEntities(ctx context.Context, account, table string, q partition.EntityQuery, fn func(*partition.StoredEntity) error) (partition.Continuation, error)
	GetTableACL(ctx context.Context, account, table string) ([]partition.SignedIdentifier, error)
	SetTableACL(ctx context.Context, account, table string, ids []partition.SignedIdentifier) error
	GetServiceProperties(ctx context.Context, account string) ([]byte, error)
	SetServiceProperties(ctx context.Context, account string, props []byte) error
}

var _ Store = (*partition.Store)(nil)

// Options configures a Server. The zero value of every field means its
// default.
type Options struct {
	// Accounts are the storage accounts served and their keys, until
	// SetAccounts replaces them. Default: the emulator's devstoreaccount1
	// with its well-known key.
	Accounts *auth.Accounts
	// Logger receives the server's records: a request cancelled by its
	// client at info, and every internal failure. Default: discard. The
	// access log, a record per request, is an Observer (AccessLog).
	Logger *slog.Logger
	// Observer, when set, is told about every request once it is
	// answered (RequestDone): the access log, metrics. Default none, and
	// then requests pay nothing for it.
	Observer Observer
	// Now is the clock of request dates, SAS expiry and error trailers.
	// Default time.Now.
	Now func() time.Time
	// MaxBodyBytes caps every request body; a larger one is 413
	// RequestBodyTooLarge. Default 4 MiB, the service's batch limit.
	MaxBodyBytes int64
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// connection timeouts Serve uses. Defaults: 10 s, 60 s, 60 s, 120 s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConns caps the connections open at once; a connection past the
	// cap is closed as soon as it is accepted. Default 4,096.
	MaxConns int
	// TLSConfig, when set, makes Serve speak HTTPS (HTTP/2 and HTTP/1.1,
	// by ALPN) with its certificates. Plain HTTP is HTTP/1.1 only.
	TLSConfig *tls.Config
	// PathStyleOnly turns off production-style URLs: by default a request
	// whose Host's first label names a configured account
	// (devstoreaccount1.table.localhost) addresses that account, and its
	// path starts at the resource.
	PathStyleOnly bool
	// SkipAPIVersionCheck accepts any well-formed x-ms-version, not only
	// those the service has published (the emulator's --skipApiVersionCheck).
	SkipAPIVersionCheck bool
	// Front, when set, wraps the server's handler in Serve: a cluster
	// node forwards there the requests its leader must answer.
	Front func(http.Handler) http.Handler
	// OAuth accepts Microsoft Entra ID bearer tokens over HTTPS, checked as
	// the emulator's --oauth basic checks them: audience, issuer and
	// lifetime, not the signature.
	OAuth bool
	// Limits, when set, emulates the service's throughput limits per
	// partition and per account (docs/limits.md).
	Limits *Limits
	// Faults, when set, injects the failures it specifies
	// (docs/faults.md).
	Faults *FaultSpec
}

func (o *Options) withDefaults() Options {
	out := Options{}
	if o != nil {
		out = *o
	}
	if out.Accounts == nil {
		out.Accounts = auth.DefaultAccounts()
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.MaxBodyBytes <= 0 {
		out.MaxBodyBytes = 4 << 20
	}
	if out.ReadHeaderTimeout <= 0 {
		out.ReadHeaderTimeout = 10 * time.Second
	}
	if out.ReadTimeout <= 0 {
		out.ReadTimeout = 60 * time.Second
	}
	if out.WriteTimeout <= 0 {
		out.WriteTimeout = 60 * time.Second
	}
	if out.IdleTimeout <= 0 {
		out.IdleTimeout = 120 * time.Second
	}
	if out.MaxHeaderBytes <= 0 {
		out.MaxHeaderBytes = 64 << 10
	}
	if out.MaxConns <= 0 {
		out.MaxConns = 4096
	}
	return out
}

// Server answers Table service requests for a store. It is an
// http.Handler; Serve runs it on a listener, over net/http, with the
// configured timeouts and connection cap.
type Server struct {
	store Store
	opts  Options
	log   *slog.Logger
	// accounts is the set in force: each request loads it once, when it
	// arrives, so a set SetAccounts swaps in reaches new requests whole
	// while those in flight finish with the set they started with.
	accounts atomic.Pointer[auth.Accounts]

	mu              sync.Mutex
	properties      map[string]storagexml.ServiceProperties // per account, loaded on first use
	propertiesWrite sync.Mutex                              // serializes Set Table Service Properties
	httpServer      *http.Server
	shuttingDown    bool          // Shutdown has begun
	shutDown        chan struct{} // closed when the first Shutdown returns
	conns           *limitListener
	// pages recycles the buffers query pages are built in (*[]byte):
	// a page of a hundred entities is tens of kilobytes, and growing a
	// fresh buffer to that size was most of a page's allocation.
	pages sync.Pool

	// running is read-locked by every handler for as long as it runs;
	// Shutdown write-locks it, so it returns only once no handler is
	// left, and a request arriving after that is refused.
	running sync.RWMutex
	// base is every request's parent context; Shutdown cancels it when
	// its grace period ends, so long handlers stop.
	base       context.Context
	cancelBase context.CancelFunc

	// emu throttles and fails requests as Options.Limits and .Faults
	// say; nil without them, when store is the one New was given.
	emu *emulator
}

// New returns a server for store. A nil opts means defaults. The server
// does not own the store: closing it is the caller's job, after Shutdown.
func New(store Store, opts *Options) *Server {
	o := opts.withDefaults()
	base, cancel := context.WithCancel(context.Background())
	s := &Server{
		store:      store,
		opts:       o,
		log:        o.Logger,
		properties: make(map[string]storagexml.ServiceProperties),
		base:       base,
		cancelBase: cancel,
	}
	if o.Limits != nil || (o.Faults != nil && !o.Faults.empty()) {
		s.emu = newEmulator(store, &o)
		s.store = s.emu
	}
	s.accounts.Store(o.Accounts)
	return s
}

// SetAccounts replaces the accounts and keys the server authenticates
// against, at once and whole: a request that arrives after it returns
// sees only the new set, one already in flight keeps the set it arrived
// with. It is how keys rotate without a restart. a must not be nil: a nil
// set is a caller's bug, and falling back to the default account would
// serve its well-known key.
func (s *Server) SetAccounts(a *auth.Accounts) {
	if a == nil {
		panic("server: SetAccounts(nil)")
	}
	s.accounts.Store(a)
}

// Accounts returns the accounts in force.
func (s *Server) Accounts() *auth.Accounts { return s.accounts.Load() }

// Serve accepts connections on ln until Shutdown, answering each request
// with the server, over TLS when Options.TLSConfig is set. It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	hs, conns, err := s.register(ln)
	if err != nil {
		return err
	}
	return serveHTTP(hs, conns)
}

// Start is Serve in the background: the server reports Serving when Start
// returns (so a readiness check asked after a start message was printed
// says ready), and the channel receives what Serve would have returned.
func (s *Server) Start(ln net.Listener) <-chan error {
	done := make(chan error, 1)
	hs, conns, err := s.register(ln)
	if err != nil {
		done <- err
		return done
	}
	go func() { done <- serveHTTP(hs, conns) }()
	return done
}

// register makes the http.Server that serves ln and records it, so
// Shutdown finds it.
func (s *Server) register(ln net.Listener) (*http.Server, net.Listener, error) {
	var h http.Handler = s
	if s.opts.Front != nil {
		h = s.opts.Front(s)
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    s.opts.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		// net/http reports malformed requests and TLS handshake failures
		// here: client faults, so debug.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	if s.opts.TLSConfig != nil {
		hs.TLSConfig = s.opts.TLSConfig.Clone()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.httpServer != nil {
		return nil, nil, errors.New("server: Serve called twice")
	}
	if s.shuttingDown {
		// Shutdown came first (it found nothing to stop): serve nothing,
		// as net/http's Serve does after its Shutdown.
		ln.Close()
		return nil, nil, http.ErrServerClosed
	}
	s.httpServer = hs
	s.conns = newLimitListener(ln, s.opts.MaxConns, s.log)
	return hs, s.conns, nil
}

func serveHTTP(hs *http.Server, conns net.Listener) error {
	if hs.TLSConfig != nil {
		return hs.ServeTLS(conns, "", "")
	}
	return hs.Serve(conns)
}

// ConnStats counts a server's client connections.
type ConnStats struct {
	Accepted int64 // since Serve, refused ones included
	Refused  int64 // closed on arrival, past Options.MaxConns
	Open     int64 // open now
}

// ConnStats reports the server's connections.
func (s *Server) ConnStats() ConnStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return ConnStats{}
	}
	return ConnStats{Accepted: s.conns.accepted.Load(), Refused: s.conns.refused.Load(), Open: s.conns.open.Load()}
}

// Serving reports whether the server takes requests: Serve has been
// called and Shutdown has not. A readiness check reports not ready from
// the moment a shutdown begins, while requests in flight finish.
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpServer != nil && !s.shuttingDown
}

// Shutdown stops accepting connections and waits, until ctx ends, for the
// requests in flight to finish. When ctx ends first, the requests still
// running are cancelled and their connections closed. Either way it
// returns only after every handler has returned, so the store may be
// closed as soon as it does.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	hs := s.httpServer
	again := s.shuttingDown
	s.shuttingDown = true
	if !again {
		s.shutDown = make(chan struct{})
	}
	done := s.shutDown
	s.mu.Unlock()
	if again {
		// The first call takes running for good: wait for it instead.
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(done)
	var err error
	if hs != nil {
		if err = hs.Shutdown(ctx); err != nil {
			s.cancelBase()
			hs.Close()
		}
	}
	s.running.Lock() // every handler has returned; later ones are refused
	s.cancelBase()
	return err
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.running.TryRLock() {
		// Shutdown has begun: the store may close at any moment.
		w.Header().Set("Connection", "close")
		rq := s.newRequest(w, r)
		rq.fail(errShuttingDown)
		s.observe(rq)
		return
	}
	defer s.running.RUnlock()
	if s.emu != nil && r.URL.Path == HotPath {
		s.serveHot(w, r)
		return
	}
	if len(r.TransferEncoding) > 0 || !r.ProtoAtLeast(1, 1) {
		// net/http reads some framings another parser on the path may
		// read differently, and drops the evidence before a handler sees
		// it: a chunked request may also have carried a Content-Length,
		// or control bytes in its chunk extensions (golang/go#80942), and
		// an HTTP/1.0 request's Transfer-Encoding is ignored. RFC 9112
		// §6.1 has the server close the connection after such a message,
		// so nothing that follows it on the connection is read as a
		// request.
		w.Header().Set("Connection", "close")
	}
	rq := s.newRequest(w, r)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler { // an injected reset on HTTP/2
				s.observe(rq)
				panic(p)
			}
			s.log.Error("panic serving request", "request_id", rq.id, "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p))
			rq.fail(errInternal)
		}
		if rq.ctx.Err() != nil {
			// The client went away (or Shutdown's grace ended) while the
			// request ran; the log says how long it kept working after.
			s.log.Info("request cancelled", "request_id", rq.id, "method", r.Method, "path", r.URL.Path,
				"duration", time.Since(rq.start), "cause", context.Cause(rq.ctx))
		}
		s.observe(rq)
	}()
	s.route(rq)
}

// observe tells the Observer, if there is one, about the answered
// request.
func (s *Server) observe(rq *request) {
	if s.opts.Observer == nil {
		return
	}
	r := rq.r
	status := max(rq.status, 0) // -1: reset, nothing answered
	path := rq.path
	if path == "" { // refused before routing read it
		path = r.URL.EscapedPath()
	}
	info := RequestInfo{
		Method:          r.Method,
		Path:            path,
		Query:           MaskSignature(r.URL.RawQuery),
		Account:         rq.account,
		Table:           rq.target.Table,
		Operation:       rq.op,
		Status:          status,
		ErrorCode:       rq.errCode,
		Start:           rq.start,
		Duration:        time.Since(rq.start),
		BytesIn:         rq.body.n,
		BytesOut:        rq.bytesOut,
		RequestID:       rq.id,
		ClientRequestID: rq.clientRequestID(),
		RemoteAddr:      r.RemoteAddr,
	}
	// A cluster's front end may repeat a refusal: it reports the one the
	// client gets, not the attempts before it.
	if svcerr.DeferReport(r.Context(), func(start time.Time) {
		info.Start, info.Duration = start, time.Since(start)
		s.opts.Observer.RequestDone(info)
	}) {
		return
	}
	s.opts.Observer.RequestDone(info)
}

// newRequestID returns a random id in the GUID form the service uses.
func newRequestID() string {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], rand.Uint64())
	binary.BigEndian.PutUint64(raw[8:], rand.Uint64())
	var id [36]byte // 8-4-4-4-12 hex digits
	hex.Encode(id[0:8], raw[0:4])
	hex.Encode(id[9:13], raw[4:6])
	hex.Encode(id[14:18], raw[6:8])
	hex.Encode(id[19:23], raw[8:10])
	hex.Encode(id[24:36], raw[10:16])
	id[8], id[13], id[18], id[23] = '-', '-', '-', '-'
	return string(id[:])
}
