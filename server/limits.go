package server

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Limits emulates the service's scalability targets (docs/limits.md):
// token buckets per partition (account, table, PartitionKey) and per
// account, charged a request's cost in entities; a request past either is
// answered 503 ServerBusy. The zero value of every field means its
// default; Validate refuses values that make no sense.
type Limits struct {
	// PartitionRate is the entities per second one partition serves.
	// Default 2,000, the service's target for a table partition.
	PartitionRate float64
	// AccountRate is the entities per second one account serves.
	// Default 20,000, the service's target for an account.
	AccountRate float64
	// Burst is how much unused rate a bucket saves up, as a time at its
	// rate; a bucket always holds at least one full batch (100
	// entities). Default 100 ms.
	Burst time.Duration
	// QueryBudget is how long a query page may run, waiting on its
	// partitions' rates, before it ends with a continuation. Default 5 s,
	// the service's page budget.
	QueryBudget time.Duration
	// MaxTracked bounds the partitions whose buckets are kept; past it the
	// least recently used is dropped. Default 65,536.
	MaxTracked int
}

// The service's targets, from "Scalability and performance targets for
// Table storage" (learn.microsoft.com/azure/storage/tables/scalability-targets).
const (
	DefaultPartitionRate = 2000
	DefaultAccountRate   = 20000
)

const (
	defaultBurst       = 100 * time.Millisecond
	defaultQueryBudget = 5 * time.Second
	defaultMaxTracked  = 1 << 16
	// minBurst lets a bucket hold a full batch, however low its rate:
	// otherwise a batch of 100 could never be served at all.
	minBurst = 100
	// rateWindow is the time constant of the rates the hot view shows:
	// each is an exponentially decaying average over about this long.
	rateWindow = time.Second
	// idleAfter is how long a bucket goes untouched before it may be
	// dropped on the way past: by then it is full again at any rate worth
	// having, and its shown rate has decayed to nothing.
	idleAfter     = 10 * time.Second
	limiterShards = 16
)

// Validate reports the first field that makes no sense: a rate or
// duration below zero, or a rate that is not a number.
func (l *Limits) Validate() error {
	switch {
	case l.PartitionRate < 0 || math.IsNaN(l.PartitionRate) || math.IsInf(l.PartitionRate, 0):
		return fmt.Errorf("the partition rate %v: want a positive number of entities per second", l.PartitionRate)
	case l.AccountRate < 0 || math.IsNaN(l.AccountRate) || math.IsInf(l.AccountRate, 0):
		return fmt.Errorf("the account rate %v: want a positive number of entities per second", l.AccountRate)
	case l.Burst < 0:
		return fmt.Errorf("the burst %v: want a positive duration", l.Burst)
	case l.QueryBudget < 0:
		return fmt.Errorf("the query budget %v: want a positive duration", l.QueryBudget)
	case l.MaxTracked < 0:
		return fmt.Errorf("the tracked partitions %d: want a positive number", l.MaxTracked)
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	if !(l.PartitionRate > 0) || math.IsInf(l.PartitionRate, 0) {
		l.PartitionRate = DefaultPartitionRate
	}
	if !(l.AccountRate > 0) || math.IsInf(l.AccountRate, 0) {
		l.AccountRate = DefaultAccountRate
	}
	if l.Burst <= 0 {
		l.Burst = defaultBurst
	}
	if l.QueryBudget <= 0 {
		l.QueryBudget = defaultQueryBudget
	}
	if l.MaxTracked <= 0 {
		l.MaxTracked = defaultMaxTracked
	}
	return l
}

// The answers to a request past a limit: the service's ServerBusy, with
// the message it documents for an account over its operations per second
// (common-rest-api-error-codes). It documents no message of its own for a
// partition over its target, so a partition's refusal carries ServerBusy's
// general one.
var (
	errPartitionBusy = &apiError{status: http.StatusServiceUnavailable, code: codeServerBusy, message: msgServerBusy}
	errAccountBusy   = &apiError{status: http.StatusServiceUnavailable, code: codeServerBusy,
		message: "Operations per second is over the account limit."}
)

// limiter holds the buckets: one per partition, in shards so that
// requests to different partitions rarely share a lock, and one per
// account.
type limiter struct {
	lim      Limits
	epoch    time.Time
	now      func() time.Duration // since epoch; a test's clock may replace it
	parts    [limiterShards]bucketSet
	accounts bucketSet
}

func newLimiter(l Limits) *limiter {
	l = l.withDefaults()
	lm := &limiter{lim: l, epoch: time.Now()}
	lm.now = func() time.Duration { return time.Since(lm.epoch) }
	perShard := max(1, l.MaxTracked/limiterShards)
	for i := range lm.parts {
		lm.parts[i].init(l.PartitionRate, l.Burst, perShard)
	}
	// Accounts are the configured ones (others fail authentication before
	// any limit), so their bound only guards against a surprise.
	lm.accounts.init(l.AccountRate, l.Burst, 1024)
	return lm
}

// partitionKey identifies a partition's bucket: a hash of the tuple, so a
// bucket's key costs 8 bytes however long the PartitionKey. Two partitions
// sharing a bucket needs a 64-bit collision among the tracked ones.
func partitionKey(account, table, pk string) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(account)
	d.WriteString("\x00")
	// Table names are case-insensitive, and at most 63 bytes: lowered on
	// the stack (a longer one is refused by the store anyway).
	var buf [64]byte
	if len(table) <= len(buf) {
		low := buf[:len(table)]
		for i := range low {
			c := table[i]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			low[i] = c
		}
		d.Write(low)
	} else {
		d.WriteString(strings.ToLower(table))
	}
	d.WriteString("\x00")
	d.WriteString(pk)
	return d.Sum64()
}

func (lm *limiter) partShard(h uint64) *bucketSet { return &lm.parts[h%limiterShards] }

// take charges cost entities to the partition and the account, or neither:
// the error is the refusal of the first one short of tokens. An empty pk
// charges the account alone (table operations).
func (lm *limiter) take(account, table, pk string, cost float64, charge bool) error {
	now := lm.now()
	var ps *bucketSet
	var h uint64
	if charge {
		h = partitionKey(account, table, pk)
		ps = lm.partShard(h)
		if !ps.take(h, now, cost, func() hotName { return hotName{account, table, pk} }) {
			return errPartitionBusy
		}
	}
	ah := xxhash.Sum64String(account)
	if !lm.accounts.take(ah, now, cost, func() hotName { return hotName{account: account} }) {
		if charge {
			ps.refund(h, now, cost)
		}
		return errAccountBusy
	}
	return nil
}

// reserve charges one entity a query returns to its partition and account,
// going into debt if need be, and says how long the query must wait for
// the tokens it took.
func (lm *limiter) reserve(account, table, pk string) time.Duration {
	now := lm.now()
	h := partitionKey(account, table, pk)
	w1 := lm.partShard(h).reserve(h, now, 1, func() hotName { return hotName{account, table, pk} })
	w2 := lm.accounts.reserve(xxhash.Sum64String(account), now, 1, func() hotName { return hotName{account: account} })
	return max(w1, w2)
}

// unreserve gives back a reservation a query did not use.
func (lm *limiter) unreserve(account, table, pk string) {
	now := lm.now()
	h := partitionKey(account, table, pk)
	lm.partShard(h).refund(h, now, 1)
	lm.accounts.refund(xxhash.Sum64String(account), now, 1)
}

// tracked counts the partition buckets held.
func (lm *limiter) tracked() int {
	n := 0
	for i := range lm.parts {
		s := &lm.parts[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// hotName is what a bucket is for, kept for the hot view.
type hotName struct{ account, table, pk string }

// maxShownKey bounds the PartitionKey a bucket keeps for the hot view, so
// its memory stays small however long the key.
const maxShownKey = 128

// bucket is one partition's or account's token bucket and its rates.
type bucket struct {
	h          uint64
	name       hotName
	tokens     float64
	last       time.Duration // when tokens was last brought up to date
	served     decaying      // entities admitted
	refused    decaying      // entities refused
	prev, next *bucket       // recency list, most recent first
}

// decaying is an exponentially decaying sum: its value over rateWindow is
// a rate over roughly the last rateWindow.
type decaying struct {
	v float64
	t time.Duration
}

func (d *decaying) add(now time.Duration, x float64) {
	d.v = d.at(now) + x
	d.t = now
}

func (d decaying) at(now time.Duration) float64 {
	if now <= d.t {
		return d.v
	}
	return d.v * math.Exp(-float64(now-d.t)/float64(rateWindow))
}

func (d decaying) rate(now time.Duration) float64 { return d.at(now) / rateWindow.Seconds() }

// bucketSet is a bounded map of buckets with a recency list: touching a
// bucket moves it to the front, and a new bucket drops idle ones from the
// back, and the least recent one when the set is full. Memory is thus
// bounded however many partitions a client touches, and an idle bucket
// (full again) is dropped without changing any answer.
type bucketSet struct {
	mu    sync.Mutex
	m     map[uint64]*bucket
	head  bucket // sentinel: head.next is the most recent
	rate  float64
	burst float64
	cap   int
}

func (s *bucketSet) init(rate float64, burst time.Duration, capacity int) {
	s.m = make(map[uint64]*bucket)
	s.head.next, s.head.prev = &s.head, &s.head
	s.rate = rate
	s.burst = max(minBurst, rate*burst.Seconds())
	s.cap = capacity
}

// get returns h's bucket brought up to now, creating it (full) if need be.
// s.mu is held.
func (s *bucketSet) get(h uint64, now time.Duration, name func() hotName) *bucket {
	b := s.m[h]
	if b == nil {
		s.evict(now)
		n := name()
		if len(n.pk) > maxShownKey {
			n.pk = n.pk[:maxShownKey]
		}
		// Clones, so a bucket never pins a request's memory.
		n.account, n.table, n.pk = strings.Clone(n.account), strings.Clone(n.table), strings.Clone(n.pk)
		b = &bucket{h: h, name: n, tokens: s.burst, last: now}
		s.m[h] = b
	} else {
		b.prev.next, b.next.prev = b.next, b.prev
		if now > b.last {
			b.tokens = min(s.burst, b.tokens+s.rate*(now-b.last).Seconds())
			b.last = now
		}
	}
	b.next, b.prev = s.head.next, &s.head
	s.head.next.prev = b
	s.head.next = b
	return b
}

// evict makes room for a new bucket: it drops up to two idle buckets from
// the back (amortizing the sweep over insertions), then the least recent
// one if the set is still full. s.mu is held.
func (s *bucketSet) evict(now time.Duration) {
	for range 2 {
		b := s.head.prev
		if b == &s.head || now-b.last < idleAfter {
			break
		}
		s.remove(b)
	}
	for len(s.m) >= s.cap {
		s.remove(s.head.prev)
	}
}

func (s *bucketSet) remove(b *bucket) {
	b.prev.next, b.next.prev = b.next, b.prev
	delete(s.m, b.h)
}

func (s *bucketSet) take(h uint64, now time.Duration, cost float64, name func() hotName) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.get(h, now, name)
	if b.tokens < cost {
		b.refused.add(now, cost)
		return false
	}
	b.tokens -= cost
	b.served.add(now, cost)
	return true
}

func (s *bucketSet) reserve(h uint64, now time.Duration, cost float64, name func() hotName) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.get(h, now, name)
	b.tokens -= cost
	b.served.add(now, cost)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / s.rate * float64(time.Second))
}

// refund gives back tokens taken at now (a request refused by the account
// after its partition admitted it, or a query's unused reservation).
func (s *bucketSet) refund(h uint64, now time.Duration, cost float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.m[h]; b != nil {
		b.tokens = min(s.burst, b.tokens+cost)
		b.served.add(now, -cost)
	}
}

// HotReport is the hot view: the busiest partitions and accounts, with
// their rates in entities per second over about the last second.
type HotReport struct {
	PartitionRate float64   `json:"partitionRate"` // the limit of each partition
	AccountRate   float64   `json:"accountRate"`   // the limit of each account
	Tracked       int       `json:"tracked"`       // partitions with a bucket now
	Partitions    []HotRate `json:"partitions"`
	Accounts      []HotRate `json:"accounts"`
}

// HotRate is one partition's or account's load.
type HotRate struct {
	Account      string  `json:"account"`
	Table        string  `json:"table,omitempty"`
	PartitionKey string  `json:"partitionKey,omitempty"` // its first 128 bytes
	Rate         float64 `json:"rate"`                   // entities admitted per second
	Refused      float64 `json:"refused"`                // entities refused per second
}

// hot reports the n busiest partitions and accounts.
func (lm *limiter) hot(n int) HotReport {
	now := lm.now()
	r := HotReport{PartitionRate: lm.lim.PartitionRate, AccountRate: lm.lim.AccountRate}
	for i := range lm.parts {
		var n int
		r.Partitions, n = lm.parts[i].top(r.Partitions, now)
		r.Tracked += n
	}
	r.Accounts, _ = lm.accounts.top(nil, now)
	trim := func(rs []HotRate) []HotRate {
		sort.Slice(rs, func(i, j int) bool {
			a, b := rs[i].Rate+rs[i].Refused, rs[j].Rate+rs[j].Refused
			if a != b {
				return a > b
			}
			return rs[i].PartitionKey < rs[j].PartitionKey
		})
		return rs[:min(n, len(rs))]
	}
	r.Partitions, r.Accounts = trim(r.Partitions), trim(r.Accounts)
	if r.Partitions == nil {
		r.Partitions = []HotRate{}
	}
	if r.Accounts == nil {
		r.Accounts = []HotRate{}
	}
	return r
}

// top appends the set's buckets with a rate worth showing, and counts the
// buckets it holds.
func (s *bucketSet) top(out []HotRate, now time.Duration) ([]HotRate, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.m {
		served, refused := b.served.rate(now), b.refused.rate(now)
		if served < 0.05 && refused < 0.05 { // would show as 0.0
			continue
		}
		out = append(out, HotRate{Account: b.name.account, Table: b.name.table, PartitionKey: b.name.pk,
			Rate: math.Round(math.Max(0, served)*10) / 10, Refused: math.Round(refused*10) / 10})
	}
	return out, len(s.m)
}

var errLimitsOff = errors.New("server: limits are not being emulated (serve --emulate-limits)")
