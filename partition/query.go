package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// EntityQuery is a Query Entities request: Filter is the $filter, Top the
// page size (0 means 1,000, the most a page holds), and NextPartitionKey /
// NextRowKey the continuation tokens of the previous page. Scope confines
// the query to a key range, as a shared access signature with a key range
// does: entities outside it are silently not seen. Its zero value is every
// key.
type EntityQuery struct {
	Filter                       string
	Top                          int
	NextPartitionKey, NextRowKey string
	Scope                        odata.KeyRange
	// Within, when set, is the range of PartitionKeys one of a cluster's
	// range groups answers for: the query reads no key outside it, and
	// one whose keys go on past its end returns, once it has read the
	// rest, a continuation at that end, so the client's next page is
	// asked of the next range.
	Within *PartitionRange
}

// PartitionRange is the PartitionKeys from Low to High ("" unbounded).
type PartitionRange struct{ Low, High string }

// keyRange is r as the clustered index's key range.
func (r PartitionRange) keyRange() odata.KeyRange {
	kr := odata.KeyRange{Start: odata.Position{Kind: odata.BeforeKey, PartitionKey: r.Low}}
	if r.High != "" {
		kr.End = odata.Position{Kind: odata.BeforeKey, PartitionKey: r.High}
	}
	return kr
}

// timeCheckEvery is how many keys a page examines between looks at the
// clock and the context.
const timeCheckEvery = 32

// reader is what a page reads from: the DB itself (one iterator reads at
// one sequence number) or a snapshot shared by several iterators.
type reader interface {
	Get(key []byte) ([]byte, error)
	NewIter(o *lsm.IterOptions) *lsm.Iterator
}

// span is a storage key range to scan: [lo, hi), or the single key lo.
type span struct {
	lo, hi []byte
	point  bool
}

// QueryEntities runs one page of a query: it scans the key ranges the
// filter allows, from the continuation on, at one snapshot, and calls fn
// for every matching entity in (PartitionKey, RowKey) order. The
// StoredEntity and its Value are valid only during the call; fn's error
// stops the page and is returned.
//
// The page ends after min(Top, 1000) entities, when PageTimeout has
// passed (possibly with no entity, but always having examined at least one
// key), or at the end of the data; the Continuation names the first key
// not examined, and is zero at the end. A filter the service rejects, or a
// forged or mismatched continuation, is InvalidInput.
func (s *Store) QueryEntities(ctx context.Context, account, tableName string, q EntityQuery, fn func(*StoredEntity) error) (Continuation, error) {
	if err := ctx.Err(); err != nil {
		return Continuation{}, err
	}
	t, err := s.acquireTable(account, tableName)
	if err != nil {
		return Continuation{}, err
	}
	defer t.release()
	top, err := pageSize(q.Top)
	if err != nil {
		return Continuation{}, err
	}
	plan, err := odata.PlanQuery(q.Filter)
	if err != nil {
		return Continuation{}, err
	}
	if !q.Scope.IsFull() {
		plan.Ranges = clipRanges(plan.Ranges, q.Scope)
	}
	// end is the continuation at Within's end, when the query goes past it.
	var end Continuation
	if w := q.Within; w != nil {
		if w.High != "" {
			past := odata.KeyRange{Start: odata.Position{Kind: odata.BeforeKey, PartitionKey: w.High}}
			if len(clipRanges(plan.Ranges, past)) > 0 {
				end = NewContinuation(w.High, "")
			}
		}
		plan.Ranges = clipRanges(plan.Ranges, w.keyRange())
	}
	var from []byte
	if c := (Continuation{q.NextPartitionKey, q.NextRowKey}); !c.IsZero() {
		pk, rk, err := c.Position()
		if err != nil {
			return Continuation{}, err
		}
		from = AppendEntityKey(nil, account, t.id, pk, rk)
	}
	spans := t.spans(plan, from)
	if len(spans) == 0 {
		return end, nil
	}

	p := page{
		ctx: ctx, t: t, plan: plan, fn: fn, top: top,
		now: s.opts.Now, deadline: s.opts.Now().Add(s.opts.PageTimeout),
		ranges: t.rangeList(),
	}
	defer p.flushReads()
	var rd reader = s.db
	if len(spans) > 1 {
		snap := s.db.NewSnapshot()
		defer snap.Close()
		rd = snap
	}
	for _, sp := range spans {
		if sp.point {
			v, err := rd.Get(sp.lo)
			switch {
			case err == nil:
				if done, err := p.visit(sp.lo, v); done || err != nil {
					return p.cont, err
				}
			case !errors.Is(err, lsm.ErrNotFound):
				return Continuation{}, fmt.Errorf("partition: query %s: %w", tableName, err)
			}
			continue
		}
		it := rd.NewIter(&lsm.IterOptions{LowerBound: sp.lo, UpperBound: sp.hi})
		for ok := it.First(); ok; ok = it.Next() {
			if done, err := p.visit(it.Key(), it.Value()); done || err != nil {
				it.Close()
				return p.cont, err
			}
		}
		if err := it.Close(); err != nil {
			return Continuation{}, fmt.Errorf("partition: query %s: %w", tableName, err)
		}
	}
	return end, nil
}

// QueryStart returns the PartitionKey a query's page starts reading at
// (before Within bounds it): its continuation's, else its filter's
// lowest, else "". A cluster routes the page to the range that holds it.
// A filter or continuation that does not parse is InvalidInput, as the
// query itself would be.
func QueryStart(q EntityQuery) (string, error) {
	if c := (Continuation{q.NextPartitionKey, q.NextRowKey}); !c.IsZero() {
		pk, _, err := c.Position()
		return pk, err
	}
	plan, err := odata.PlanQuery(q.Filter)
	if err != nil {
		return "", err
	}
	if !q.Scope.IsFull() {
		plan.Ranges = clipRanges(plan.Ranges, q.Scope)
	}
	if len(plan.Ranges) == 0 {
		return "", nil
	}
	return plan.Ranges[0].Start.PartitionKey, nil
}

// clipRanges intersects each of a plan's sorted, disjoint ranges with
// scope, keeping the order. It returns a new slice: a plan's ranges may be
// shared (odata hands every unbounded plan the same one).
func clipRanges(rs []odata.KeyRange, scope odata.KeyRange) []odata.KeyRange {
	out := make([]odata.KeyRange, 0, len(rs))
	for _, r := range rs {
		if x, ok := r.Intersect(scope); ok {
			out = append(out, x)
		}
	}
	return out
}

// QueryEntitiesPage is QueryEntities collecting the page's entities, each
// with its own copy of the value.
func (s *Store) QueryEntitiesPage(ctx context.Context, account, table string, q EntityQuery) ([]StoredEntity, Continuation, error) {
	var out []StoredEntity
	c, err := s.QueryEntities(ctx, account, table, q, func(e *StoredEntity) error {
		c := *e
		c.Value = bytes.Clone(e.Value)
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, Continuation{}, err
	}
	return out, c, nil
}

// spans turns the plan's key ranges into storage key ranges of t, clipped
// to start at from (a continuation) when it is set.
func (t *table) spans(plan *odata.Plan, from []byte) []span {
	out := make([]span, 0, len(plan.Ranges))
	for _, r := range plan.Ranges {
		sp := span{lo: t.positionKey(r.Start, false), hi: t.positionKey(r.End, true)}
		if from != nil {
			if bytes.Compare(sp.hi, from) <= 0 {
				continue
			}
			if bytes.Compare(sp.lo, from) < 0 {
				sp.lo = from
			}
		}
		// A point's successor key is the point plus 0x00, so a clipped
		// point is either skipped or unchanged.
		_, _, sp.point = r.Point()
		out = append(out, sp)
	}
	return out
}

// positionKey turns a plan Position into a storage key of t (see
// odata.KeyRange): an unbounded start is the table's first key, an
// unbounded end the successor of all of them.
func (t *table) positionKey(p odata.Position, end bool) []byte {
	k := append(make([]byte, 0, len(t.prefix)+len(p.PartitionKey)+len(p.RowKey)+5), t.prefix...)
	switch p.Kind {
	case odata.Unbounded:
		if end {
			return prefixSuccessor(t.prefix)
		}
		return k
	case odata.BeforeKey:
		return appendEscaped(appendEscaped(k, p.PartitionKey), p.RowKey)
	case odata.AfterKey:
		return append(appendEscaped(appendEscaped(k, p.PartitionKey), p.RowKey), 0x00)
	default: // AfterPartition: past every key with the partition's prefix
		k = appendEscaped(k, p.PartitionKey)
		k[len(k)-1]++ // the terminator 0x00 0x01 becomes 0x00 0x02
		return k
	}
}

// page is the state of one query page.
type page struct {
	ctx      context.Context
	t        *table
	plan     *odata.Plan
	fn       func(*StoredEntity) error
	top      int
	now      func() time.Time
	deadline time.Time

	returned, examined int
	cont               Continuation
	ent                StoredEntity
	pkBuf, rkBuf       []byte

	ranges   []*rangeState
	cur      *rangeState // range of the last key examined
	curReads int64
}

// visit examines one key; done means the page is over (p.cont says where
// the next one starts).
func (p *page) visit(key, value []byte) (done bool, err error) {
	if p.returned == p.top || (p.examined > 0 && p.examined%timeCheckEvery == 0 && p.outOfTime()) {
		if err := p.ctx.Err(); err != nil {
			return true, err
		}
		k, err := DecodeEntityKey(key)
		if err != nil {
			return true, err
		}
		p.cont = NewContinuation(k.PartitionKey, k.RowKey)
		return true, nil
	}
	p.examined++
	pk, off := readEscaped(key, len(p.t.prefix), p.pkBuf)
	if off < 0 {
		return true, fmt.Errorf("partition: entity key %x: %w", key, errBadKey)
	}
	rk, off := readEscaped(key, off, p.rkBuf)
	if off != len(key) {
		return true, fmt.Errorf("partition: entity key %x: %w", key, errBadKey)
	}
	p.countRead(pk)
	ok, err := p.plan.Match(pk, rk, value)
	if err != nil {
		return true, fmt.Errorf("partition: entity (%q, %q): %w", pk, rk, err)
	}
	if !ok {
		return false, nil
	}
	e := &p.ent
	if string(pk) != e.PartitionKey {
		e.PartitionKey = string(pk)
	}
	e.RowKey = string(rk)
	if e.Timestamp, err = odata.EncodedTimestamp(value); err != nil {
		return true, fmt.Errorf("partition: entity (%q, %q): %w", pk, rk, err)
	}
	e.Value = value
	p.returned++
	if err := p.fn(e); err != nil {
		return true, err
	}
	return false, nil
}

func (p *page) outOfTime() bool {
	return p.ctx.Err() != nil || p.now().After(p.deadline)
}

// countRead accounts a key examined to its range, switching ranges only
// when the scan crosses a boundary.
func (p *page) countRead(pk []byte) {
	if c := p.cur; c != nil && string(pk) >= c.start && (c.end == "" || string(pk) < c.end) {
		p.curReads++
		return
	}
	p.flushReads()
	p.cur = findRangeBytes(p.ranges, pk)
	p.curReads = 1
}

func (p *page) flushReads() {
	if p.cur != nil && p.curReads > 0 {
		p.cur.reads.Add(p.curReads)
	}
	p.curReads = 0
}
