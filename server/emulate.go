package server

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tabuladb/tabula/partition"
)

// emulator stands between the handlers and the store when Options.Limits
// or Options.Faults is set, and does what the service does to a client
// past its limits or in a bad hour: throttles, fails, delays, loses
// answers. Without either option the server never builds one, so the
// requests of a server without them run exactly as before.
//
// It only ever refuses an operation before handing it to the store, or
// replaces the answer of one the store has done; it never changes what is
// written.
type emulator struct {
	inner  Store
	limits *limiter  // nil: no limits
	faults *injector // nil: no faults
}

func newEmulator(inner Store, o *Options) *emulator {
	e := &emulator{inner: inner}
	if o.Limits != nil {
		e.limits = newLimiter(*o.Limits)
	}
	if o.Faults != nil && !o.Faults.empty() {
		e.faults = newInjector(o.Faults)
	}
	return e
}

// injector draws the faults of a FaultSpec from its seeded generator.
type injector struct {
	spec  *FaultSpec
	seed  uint64 // the spec's, or one drawn for it
	start time.Time
	mu    sync.Mutex
	rng   *rand.Rand
}

func newInjector(fs *FaultSpec) *injector {
	seed := fs.seed
	if !fs.hasSeed {
		seed = rand.Uint64()
	}
	return &injector{spec: fs, seed: seed, start: time.Now(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// FaultSeed is the seed the server's faults are drawn with: the
// specification's, or the one drawn for it when it named none, so a log
// can say how to replay a run's faults (given the same order of
// requests). ok is false when the server injects no faults.
func (s *Server) FaultSeed() (seed uint64, ok bool) {
	if s.emu == nil || s.emu.faults == nil {
		return 0, false
	}
	return s.emu.faults.seed, true
}

// fault is what befalls one request.
type fault struct {
	hit   bool
	f     failure
	after bool
	delay time.Duration
}

// draw decides one request's fault: one uniform draw picks a failure by
// its rate, another its latency.
func (in *injector) draw(k opKind) fault {
	kf := &in.spec.kinds[k]
	in.mu.Lock()
	defer in.mu.Unlock()
	var out fault
	u := in.rng.Float64()
	acc := 0.0
pick:
	for f := range kf.rates {
		for phase, r := range kf.rates[f] {
			acc += r
			if r > 0 && u < acc {
				out = fault{hit: true, f: failure(f), after: phase == phaseAfter}
				break pick
			}
		}
	}
	switch l := kf.latency; l.dist {
	case latencyFixed:
		out.delay = l.min
	case latencyUniform:
		out.delay = l.min + time.Duration(in.rng.Int64N(int64(l.max-l.min)+1))
	case latencyExp:
		// Capped at ten means (a draw past it has odds of e^-10) and at
		// the spec's ceiling, so one draw cannot hold a request for ever.
		d := min(in.rng.ExpFloat64(), 10) * float64(l.min)
		out.delay = min(time.Duration(d), maxFaultLatency)
	}
	return out
}

// errInjectedReset makes fail reset the connection instead of answering.
var errInjectedReset = errors.New("server: injected connection reset")

// Injected failures carry the messages the server gives its own.
var (
	errInjectedBusy     = &apiError{status: http.StatusServiceUnavailable, code: codeServerBusy, message: msgServerBusy}
	errInjectedInternal = &apiError{status: http.StatusInternalServerError, code: codeInternalError, message: msgInternalError}
	errInjectedTimeout  = &apiError{status: http.StatusInternalServerError, code: codeOperationTimedOut, message: msgOperationTimedOut}
	// errUnavailable refuses a request to a range made unavailable, as the
	// service does while it moves a partition between servers.
	errUnavailable = &apiError{status: http.StatusServiceUnavailable, code: codeServerBusy, message: msgServerBusy}
)

func (f fault) err() error {
	switch f.f {
	case failBusy:
		return errInjectedBusy
	case failInternal:
		return errInjectedInternal
	case failTimeout:
		return errInjectedTimeout
	}
	return errInjectedReset
}

// begin does what happens before an operation of kind k on a partition
// (pk; "" for a table operation, charged to the account alone, and
// charge false for it) costing cost entities: outage, limits, latency, a
// failure before. It returns the fault drawn, so end can inject a failure
// after.
func (e *emulator) begin(ctx context.Context, k opKind, account, table, pk string, cost float64, entity bool) (fault, error) {
	if entity && e.unavailable(table, pk) {
		return fault{}, errUnavailable
	}
	if e.limits != nil {
		if err := e.limits.take(account, table, pk, cost, entity); err != nil {
			return fault{}, err
		}
	}
	if e.faults == nil {
		return fault{}, nil
	}
	f := e.faults.draw(k)
	if f.delay > 0 {
		if err := sleepCtx(ctx, f.delay); err != nil {
			return fault{}, err
		}
	}
	if f.hit && !f.after {
		return fault{}, f.err()
	}
	return f, nil
}

// end answers an operation the store has done: its own error, or the
// failure drawn to happen after the commit, or nil.
func end(f fault, err error) error {
	if err == nil && f.hit && f.after {
		return f.err()
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unavailable reports whether the partition is in an outage now.
func (e *emulator) unavailable(table, pk string) bool {
	if e.faults == nil || len(e.faults.spec.down) == 0 {
		return false
	}
	since := time.Since(e.faults.start)
	for _, u := range e.faults.spec.down {
		if since >= u.start && since < u.start+u.dur && strings.EqualFold(table, u.table) && strings.HasPrefix(pk, u.prefix) {
			return true
		}
	}
	return false
}

func applyKind(k partition.OpKind) opKind {
	switch k {
	case partition.OpInsert:
		return kindInsert
	case partition.OpUpdate:
		return kindUpdate
	case partition.OpMerge:
		return kindMerge
	case partition.OpDelete:
		return kindDelete
	}
	return kindUpsert
}

func (e *emulator) Apply(ctx context.Context, account, table string, op partition.Op) (partition.StoredEntity, error) {
	pk := ""
	if op.Entity != nil {
		pk = op.Entity.PartitionKey
	}
	f, err := e.begin(ctx, applyKind(op.Kind), account, table, pk, 1, true)
	if err != nil {
		return partition.StoredEntity{}, err
	}
	res, err := e.inner.Apply(ctx, account, table, op)
	if err = end(f, err); err != nil {
		return partition.StoredEntity{}, err
	}
	return res, nil
}

// ExecuteBatch costs the batch's size on its partition: a batch of 100
// entities is 100 of the partition's 2,000 a second.
func (e *emulator) ExecuteBatch(ctx context.Context, account, table string, ops []partition.Op) ([]partition.StoredEntity, error) {
	pk := ""
	if len(ops) > 0 && ops[0].Entity != nil {
		pk = ops[0].Entity.PartitionKey
	}
	f, err := e.begin(ctx, kindBatch, account, table, pk, float64(max(1, len(ops))), true)
	if err != nil {
		return nil, err
	}
	res, err := e.inner.ExecuteBatch(ctx, account, table, ops)
	if err = end(f, err); err != nil {
		return nil, err
	}
	return res, nil
}

func (e *emulator) GetEntity(ctx context.Context, account, table, pk, rk string) (partition.StoredEntity, error) {
	f, err := e.begin(ctx, kindGet, account, table, pk, 1, true)
	if err != nil {
		return partition.StoredEntity{}, err
	}
	res, err := e.inner.GetEntity(ctx, account, table, pk, rk)
	if err = end(f, err); err != nil {
		return partition.StoredEntity{}, err
	}
	return res, nil
}

// errStopPage ends a page early, inside the store's scan.
var errStopPage = errors.New("server: page ended by the emulator")

// QueryEntities runs a page at its partitions' rates: the request costs
// one on the account, then every entity it returns one on its partition
// and its account, the scan waiting for them as a scan on the service
// proceeds at what its partitions serve. A page whose waits would take it
// past the query budget ends there with a continuation, as do pages that
// reach a range in an outage after returning something (one that starts
// in it is refused).
func (e *emulator) QueryEntities(ctx context.Context, account, table string, q partition.EntityQuery, fn func(*partition.StoredEntity) error) (partition.Continuation, error) {
	f, err := e.begin(ctx, kindQuery, account, table, "", 1, false)
	if err != nil {
		return partition.Continuation{}, err
	}
	if e.limits == nil && (e.faults == nil || len(e.faults.spec.down) == 0) {
		next, err := e.inner.QueryEntities(ctx, account, table, q, fn)
		return next, end(f, err)
	}
	var (
		n       int
		started = time.Now()
		stop    partition.Continuation
	)
	next, err := e.inner.QueryEntities(ctx, account, table, q, func(se *partition.StoredEntity) error {
		if e.unavailable(table, se.PartitionKey) {
			if n == 0 {
				return errUnavailable
			}
			stop = partition.NewContinuation(se.PartitionKey, se.RowKey)
			return errStopPage
		}
		if e.limits != nil {
			wait := e.limits.reserve(account, table, se.PartitionKey)
			if wait > 0 {
				if n > 0 && time.Since(started)+wait > e.limits.lim.QueryBudget {
					e.limits.unreserve(account, table, se.PartitionKey)
					stop = partition.NewContinuation(se.PartitionKey, se.RowKey)
					return errStopPage
				}
				if err := sleepCtx(ctx, wait); err != nil {
					return err
				}
			}
		}
		n++
		return fn(se)
	})
	if errors.Is(err, errStopPage) {
		next, err = stop, nil
	}
	return next, end(f, err)
}

func (e *emulator) CreateTable(ctx context.Context, account, name string) (partition.Table, error) {
	f, err := e.begin(ctx, kindTable, account, name, "", 1, false)
	if err != nil {
		return partition.Table{}, err
	}
	t, err := e.inner.CreateTable(ctx, account, name)
	if err = end(f, err); err != nil {
		return partition.Table{}, err
	}
	return t, nil
}

func (e *emulator) DeleteTable(ctx context.Context, account, name string) error {
	f, err := e.begin(ctx, kindTable, account, name, "", 1, false)
	if err != nil {
		return err
	}
	return end(f, e.inner.DeleteTable(ctx, account, name))
}

func (e *emulator) QueryTables(ctx context.Context, account string, q partition.TableQuery) (partition.TablePage, error) {
	f, err := e.begin(ctx, kindTable, account, "", "", 1, false)
	if err != nil {
		return partition.TablePage{}, err
	}
	p, err := e.inner.QueryTables(ctx, account, q)
	if err = end(f, err); err != nil {
		return partition.TablePage{}, err
	}
	return p, nil
}

// The rest pass through: the server reads tables, ACLs and service
// properties for its own purposes (authorization, CORS) too, and those
// reads are no client's transactions.

func (e *emulator) GetTable(ctx context.Context, account, name string) (partition.Table, error) {
	return e.inner.GetTable(ctx, account, name)
}

func (e *emulator) GetTableACL(ctx context.Context, account, table string) ([]partition.SignedIdentifier, error) {
	return e.inner.GetTableACL(ctx, account, table)
}

func (e *emulator) SetTableACL(ctx context.Context, account, table string, ids []partition.SignedIdentifier) error {
	return e.inner.SetTableACL(ctx, account, table, ids)
}

func (e *emulator) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	return e.inner.GetServiceProperties(ctx, account)
}

func (e *emulator) SetServiceProperties(ctx context.Context, account string, props []byte) error {
	return e.inner.SetServiceProperties(ctx, account, props)
}

// resetConnection drops the request's connection with a TCP reset (an
// HTTP/2 stream with RST_STREAM), answering nothing: the client cannot
// tell whether its request was done.
func (rq *request) resetConnection() {
	rq.status = -1 // nothing more is written
	if conn, _, err := http.NewResponseController(rq.w).Hijack(); err == nil {
		if tc := tcpConn(conn); tc != nil {
			_ = tc.SetLinger(0) // close sends RST, not FIN
		}
		conn.Close()
		return
	}
	// HTTP/2 cannot hand over its connection; net/http resets the stream
	// of a handler that panics with ErrAbortHandler.
	panic(http.ErrAbortHandler)
}

// tcpConn finds the TCP connection under c (TLS, the connection cap).
func tcpConn(c net.Conn) *net.TCPConn {
	for range 4 {
		switch x := c.(type) {
		case *net.TCPConn:
			return x
		case *limitConn:
			c = x.Conn
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// HotPath is where a server emulating limits serves its hot view as JSON
// (HotReport), to clients on the loopback interface only; n= caps the
// entries (default 20, at most 1,000). tabula inspect --hot reads it.
const HotPath = "/_tabula/hot"

// serveHot answers HotPath. The path cannot be a Table service URL: an
// account or table name never starts with an underscore.
func (s *Server) serveHot(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		http.Error(w, "the hot view is served to loopback clients only", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if s.emu.limits == nil {
		http.Error(w, errLimitsOff.Error(), http.StatusNotFound)
		return
	}
	n := 20
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			http.Error(w, "n: want 1 to 1000", http.StatusBadRequest)
			return
		}
	}
	body, err := json.Marshal(s.emu.limits.hot(n))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// Hot reports the n busiest partitions and accounts of a server emulating
// limits.
func (s *Server) Hot(n int) (HotReport, error) {
	if s.emu == nil || s.emu.limits == nil {
		return HotReport{}, errLimitsOff
	}
	return s.emu.limits.hot(max(0, n)), nil
}
