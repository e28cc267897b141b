package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/vfs"
)

const (
	spanGroup  = 7
	otherAcct  = "otheraccount"
	spanTable  = "alpha"
	spanLow    = "p03"
	spanHigh   = "p07"
	srcApplied = 42
)

var testSpan = Span{Account: acct, Table: spanTable, LowPartitionKey: spanLow, HighPartitionKey: spanHigh}

// fillSpanStore creates three tables (alpha and beta of acct, alpha of
// another account) in the order given and fills them: partitions p00 to
// p09 (and p05x), rows every step-th of r000..r(rows-1), values tagged by
// variant so that two stores' data differ.
func fillSpanStore(t testing.TB, s *Store, tables []Span, variant string, rows, step int) {
	t.Helper()
	ctx := context.Background()
	for _, tb := range tables {
		if _, err := s.CreateTable(ctx, tb.Account, tb.Table); err != nil {
			t.Fatal(err)
		}
	}
	pks := []string{"p00", "p01", "p02", "p03", "p04", "p05", "p05x", "p06", "p07", "p08", "p09"}
	for _, tb := range tables {
		for _, pk := range pks {
			for r := 0; r < rows; r += step {
				e := ent(pk, fmt.Sprintf("r%03d", r), "V", variant+"/"+tb.Account+"/"+tb.Table+"/"+pk, "N", r, "Pad", strings.Repeat("x", r%7*20))
				if _, err := s.Apply(ctx, tb.Account, tb.Table, Op{Kind: OpInsertOrReplace, Entity: e}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

var spanTables = []Span{{Account: acct, Table: spanTable}, {Account: acct, Table: "beta"}, {Account: otherAcct, Table: spanTable}}

// allEntities reads every entity of a table, page by page.
func allEntities(t testing.TB, s *Store, account, table string) []StoredEntity {
	t.Helper()
	var out []StoredEntity
	q := EntityQuery{}
	for {
		page, cont, err := s.QueryEntitiesPage(context.Background(), account, table, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if cont.IsZero() {
			return out
		}
		q.NextPartitionKey, q.NextRowKey = cont.NextPartitionKey, cont.NextRowKey
	}
}

// fmtEntities renders the entities whose PartitionKey keep accepts.
func fmtEntities(es []StoredEntity, keep func(pk string) bool) string {
	var b strings.Builder
	for _, e := range es {
		if keep(e.PartitionKey) {
			fmt.Fprintf(&b, "%s/%s@%d %x\n", e.PartitionKey, e.RowKey, e.Timestamp, e.Value)
		}
	}
	return b.String()
}

func inSpan(pk string) bool     { return testSpan.Contains(pk) }
func outOfSpan(pk string) bool  { return !testSpan.Contains(pk) }
func everything(pk string) bool { return true }

// storeView renders every table of spanTables, the alpha table of acct
// split into its span and the rest.
type storeView struct {
	span, rest, others string
}

func viewOf(t testing.TB, s *Store) storeView {
	t.Helper()
	a := allEntities(t, s, acct, spanTable)
	v := storeView{span: fmtEntities(a, inSpan), rest: fmtEntities(a, outOfSpan)}
	for _, tb := range spanTables[1:] {
		v.others += tb.Account + "/" + tb.Table + "\n" + fmtEntities(allEntities(t, s, tb.Account, tb.Table), everything)
	}
	return v
}

// spanStream takes a span snapshot of s and returns its stream.
func spanStream(t testing.TB, s *Store, group uint64, sp Span) []byte {
	t.Helper()
	ss, err := s.SnapshotSpan(group, sp)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	var buf bytes.Buffer
	n, err := ss.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("span snapshot: %d bytes reported, %d written, %v", n, buf.Len(), err)
	}
	return buf.Bytes()
}

// newSpanSource is a store holding the source data, its clock an hour
// ahead of the target's, and group spanGroup applied to srcApplied.
func newSpanSource(t *testing.T, rows int) *testEnv {
	ahead := time.Now().Add(time.Hour)
	src := newEnv(t, &Options{Now: func() time.Time { return ahead }})
	fillSpanStore(t, src.s, spanTables, "new", rows, 1)
	ctx := WithStamp(context.Background(), Stamp{Group: spanGroup, Index: srcApplied, Timestamp: odata.DateTimeFromTime(ahead)})
	if _, err := src.s.Apply(ctx, acct, spanTable, Op{Kind: OpInsertOrReplace, Entity: ent("p04", "stamped", "S", 1)}); err != nil {
		t.Fatal(err)
	}
	return src
}

// newSpanTarget is a store with other data in and around the span, its
// tables created in another order (so their ids differ from the
// source's), alpha split into several ranges, group spanGroup applied to
// 5.
func newSpanTarget(t *testing.T, opts *Options, rows int) *testEnv {
	dst := newEnv(t, &Options{SplitBytes: int64(rows) * 40, SplitOpsPerSecond: 1e9})
	if opts != nil {
		// Another filesystem (a crash-cloning one): reopen on it, empty.
		dst.s.Close()
		dst.fs = opts.LSM.FS
		dst.opts.LSM = opts.LSM
		dst.open()
	}
	fillSpanStore(t, dst.s, []Span{spanTables[2], spanTables[1], spanTables[0]}, "old", rows, 2)
	for range 40 {
		dst.s.maintain(time.Second)
	}
	rs, err := dst.s.Ranges(context.Background(), acct, spanTable)
	if err != nil || len(rs) < 3 {
		t.Fatalf("the target's ranges: %v, %v; want several", rs, err)
	}
	if err := dst.s.SyncApplied(spanGroup, 5); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestSpanSnapshotIngest: a span of one table, snapshotted from a store
// with several tables and partitions, ingested into a store with other
// data in and around it: afterwards the span equals the source's exactly
// (keys, timestamps, values), nothing outside it changed, the group's
// applied index is the source's, range statistics are exact (before and
// after a reopen), queries across the span's edges see the new data, and
// the target's clock issues past the ingested timestamps.
func TestSpanSnapshotIngest(t *testing.T) {
	ctx := context.Background()
	src := newSpanSource(t, 12)
	dst := newSpanTarget(t, nil, 12)
	before := viewOf(t, dst.s)
	want := viewOf(t, src.s)
	if !strings.Contains(want.span, "p04/stamped@") {
		t.Fatal("the source lacks its stamped entity")
	}

	ss, err := src.s.SnapshotSpan(spanGroup, testSpan)
	if err != nil {
		t.Fatal(err)
	}
	if ss.AppliedIndex() != srcApplied {
		t.Fatalf("snapshot applied index %d, want %d", ss.AppliedIndex(), srcApplied)
	}
	// The view is of its instant: later writes to the source are not in it.
	if _, err := src.s.Apply(ctx, acct, spanTable, Op{Kind: OpInsert, Entity: ent("p05", "later")}); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if _, err := ss.WriteTo(&stream); err != nil {
		t.Fatal(err)
	}
	ss.Close()

	applied, err := dst.s.IngestSpan(spanGroup, Span{Account: acct, Table: "ALPHA", LowPartitionKey: spanLow, HighPartitionKey: spanHigh}, bytes.NewReader(stream.Bytes()))
	if err != nil || applied != srcApplied {
		t.Fatalf("ingest: applied %d, %v", applied, err)
	}
	check := func(when string) {
		t.Helper()
		got := viewOf(t, dst.s)
		if got.span != want.span {
			t.Fatalf("%s: the span differs from the source's:\n%s---\n%s", when, got.span, want.span)
		}
		if got.rest != before.rest || got.others != before.others {
			t.Fatalf("%s: data outside the span changed", when)
		}
		wantApplied(t, dst.s, spanGroup, srcApplied)
		if err := checkPLRanges(ctx, dst.s); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if n := rawKeys(t, dst.s.db, []byte{nsStaged}, []byte{nsStaged + 1}); n != 0 {
			t.Fatalf("%s: %d staged pairs left", when, n)
		}
		// A query across both edges of the span, and a point read.
		page, _, err := dst.s.QueryEntitiesPage(ctx, acct, spanTable, EntityQuery{Filter: "PartitionKey ge 'p02' and PartitionKey le 'p07' and N lt 4"})
		if err != nil {
			t.Fatal(err)
		}
		var inside, outside int
		for _, e := range page {
			ent, err := e.Entity()
			if err != nil {
				t.Fatal(err)
			}
			variant := strings.SplitN(props(ent)["V"].Str(), "/", 2)[0]
			if testSpan.Contains(e.PartitionKey) != (variant == "new") {
				t.Fatalf("%s: entity %s/%s is %q data", when, e.PartitionKey, e.RowKey, variant)
			}
			if testSpan.Contains(e.PartitionKey) {
				inside++
			} else {
				outside++
			}
		}
		if inside != 5*4 || outside != 2*2 {
			t.Fatalf("%s: the query found %d entities in the span, %d around it; want 20, 4", when, inside, outside)
		}
		if _, err := dst.s.GetEntity(ctx, acct, spanTable, "p04", "stamped"); err != nil {
			t.Fatalf("%s: point read of an ingested entity: %v", when, err)
		}
	}
	check("after the ingest")

	// Writes go on, in and out of the span, and the counts follow.
	ingested := allEntities(t, dst.s, acct, spanTable)
	se := mustApply(t, dst.s, spanTable, Op{Kind: OpInsert, Entity: ent("p05", "fresh")})
	for _, e := range ingested {
		if testSpan.Contains(e.PartitionKey) && se.Timestamp <= e.Timestamp {
			t.Fatalf("a write after the ingest committed at %d, not past the ingested %d", se.Timestamp, e.Timestamp)
		}
	}
	mustApply(t, dst.s, spanTable, Op{Kind: OpDelete, Entity: ent("p05", "fresh"), IfMatch: "*"})
	check("after more writes")
	dst.reopen()
	check("after a reopen")
}

// TestSpanSnapshotWholeAndEmpty: the span {"", ""} is the whole table; a
// span the source holds nothing of empties the target's.
func TestSpanSnapshotWholeAndEmpty(t *testing.T) {
	ctx := context.Background()
	src := newSpanSource(t, 4)
	dst := newSpanTarget(t, nil, 4)
	whole := Span{Account: acct, Table: spanTable}
	if _, err := dst.s.IngestSpan(spanGroup, whole, bytes.NewReader(spanStream(t, src.s, spanGroup, whole))); err != nil {
		t.Fatal(err)
	}
	if got, want := fmtEntities(allEntities(t, dst.s, acct, spanTable), everything), fmtEntities(allEntities(t, src.s, acct, spanTable), everything); got != want {
		t.Fatalf("whole table:\n%s---\n%s", got, want)
	}
	empty := Span{Account: acct, Table: spanTable, LowPartitionKey: "p01", HighPartitionKey: "p01a"}
	if _, err := src.s.IngestSpan(3, empty, bytes.NewReader(spanStream(t, dst.s, 3, Span{Account: acct, Table: spanTable, LowPartitionKey: "p01", HighPartitionKey: "p01a"}))); err != nil {
		t.Fatal(err)
	}
	// dst's p01 is now src's; empty it in dst by ingesting an empty span
	// taken from a store whose table has nothing there.
	blank := newEnv(t, nil)
	blank.createTable(spanTable)
	blankStream := spanStream(t, blank.s, 3, empty)
	if !bytes.Equal(blankStream, EmptySpanStream(3, empty)) {
		t.Fatalf("EmptySpanStream differs from the stream of an empty span:\n%x\n%x", EmptySpanStream(3, empty), blankStream)
	}
	if _, err := dst.s.IngestSpan(3, empty, bytes.NewReader(blankStream)); err != nil {
		t.Fatal(err)
	}
	for _, e := range allEntities(t, dst.s, acct, spanTable) {
		if empty.Contains(e.PartitionKey) {
			t.Fatalf("entity %s/%s survived the ingest of an empty span", e.PartitionKey, e.RowKey)
		}
	}
	wantApplied(t, dst.s, 3, 0)
	if err := checkPLRanges(ctx, dst.s); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.s.IngestSpan(3, Span{Account: acct, Table: spanTable, LowPartitionKey: "b", HighPartitionKey: "a"}, bytes.NewReader(nil)); err == nil {
		t.Fatal("an empty span was taken")
	}
	if _, err := dst.s.IngestSpan(3, Span{Account: acct, Table: "missing"}, bytes.NewReader(nil)); ErrorCode(err) != CodeTableNotFound {
		t.Fatalf("ingest into a missing table: %v", err)
	}
}

// spanEnt is an entity of a hand-made span stream.
type spanEnt struct{ pk, rk, value string }

// encodeSpanStream writes a span stream by the format of docs/snapshot.md,
// independently of SpanSnapshot.WriteTo, so the tests can make streams it
// would never write.
func encodeSpanStream(sp Span, group, applied uint64, ents []spanEnt) []byte {
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	b := []byte("TBLSPAN\x01")
	for _, s := range []string{sp.Account, sp.Table, sp.LowPartitionKey, sp.HighPartitionKey} {
		b = str(b, s)
	}
	b = binary.BigEndian.AppendUint64(b, group)
	b = binary.BigEndian.AppendUint64(b, applied)
	for _, e := range ents {
		b = append(b, 0x01)
		b = str(str(str(b, e.pk), e.rk), e.value)
	}
	b = append(b, 0x00)
	b = binary.BigEndian.AppendUint64(b, uint64(len(ents)))
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
}

func encodedValue(n int) string {
	return string(odata.AppendEncoded(nil, odata.DateTime(1_000_000+n), []odata.Property{{Name: "N", Value: odata.Int32Value(int32(n))}}))
}

// TestSpanIngestRefusesBadStreams: a stream cut at any byte, with any
// byte flipped, with bytes after it, of another span or group, or well
// checksummed but out of order, outside its span, or with a value the
// service cannot read, is refused with ErrBadSpanSnapshot, and the
// target is left exactly as it was, with no staged pair behind.
func TestSpanIngestRefusesBadStreams(t *testing.T) {
	src := newSpanSource(t, 3)
	dst := newSpanTarget(t, nil, 3)
	before := viewOf(t, dst.s)
	stream := spanStream(t, src.s, spanGroup, testSpan)

	if applied, err := CheckSpanSnapshot(spanGroup, testSpan, bytes.NewReader(EmptySpanStream(spanGroup, testSpan))); err != nil || applied != 0 {
		t.Fatalf("CheckSpanSnapshot of an empty stream: %d, %v", applied, err)
	}
	if applied, err := CheckSpanSnapshot(spanGroup, testSpan, bytes.NewReader(stream)); err != nil || applied != srcApplied {
		t.Fatalf("CheckSpanSnapshot of a good stream: %d, %v; want %d", applied, err, srcApplied)
	}
	refused := func(what string, data []byte, sp Span, group uint64) {
		t.Helper()
		_, err := dst.s.IngestSpan(group, sp, bytes.NewReader(data))
		if !errors.Is(err, ErrBadSpanSnapshot) {
			t.Fatalf("%s: %v, want ErrBadSpanSnapshot", what, err)
		}
		if _, err := CheckSpanSnapshot(group, sp, bytes.NewReader(data)); !errors.Is(err, ErrBadSpanSnapshot) {
			t.Fatalf("CheckSpanSnapshot, %s: %v, want ErrBadSpanSnapshot", what, err)
		}
	}
	for i := range stream {
		refused(fmt.Sprintf("cut at %d of %d", i, len(stream)), stream[:i], testSpan, spanGroup)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range stream {
		bad := bytes.Clone(stream)
		bad[i] ^= byte(1 + r.IntN(255))
		refused(fmt.Sprintf("byte %d flipped", i), bad, testSpan, spanGroup)
	}
	refused("a byte past the checksum", append(bytes.Clone(stream), 0), testSpan, spanGroup)
	refused("another group", stream, testSpan, spanGroup+1)
	refused("another span", stream, Span{Account: acct, Table: spanTable, LowPartitionKey: spanLow}, spanGroup)
	refused("another table", stream, Span{Account: acct, Table: "beta", LowPartitionKey: spanLow, HighPartitionKey: spanHigh}, spanGroup)
	refused("another account", stream, Span{Account: otherAcct, Table: spanTable, LowPartitionKey: spanLow, HighPartitionKey: spanHigh}, spanGroup)

	ok := []spanEnt{{"p03", "a", encodedValue(1)}, {"p03", "b", encodedValue(2)}, {"p06", "", encodedValue(3)}}
	if _, err := newEnv(t, nil).s.IngestSpan(spanGroup, testSpan, bytes.NewReader(encodeSpanStream(testSpan, spanGroup, 1, ok))); !IsCode(err, CodeTableNotFound) {
		t.Fatalf("the hand-made stream into a store without the table: %v", err)
	}
	for _, c := range []struct {
		what string
		ents []spanEnt
	}{
		{"out of order", []spanEnt{ok[1], ok[0]}},
		{"a duplicate", []spanEnt{ok[0], ok[0]}},
		{"below the span", []spanEnt{{"p02", "a", encodedValue(1)}, ok[0]}},
		{"at the span's end", []spanEnt{ok[0], {"p07", "", encodedValue(1)}}},
		{"an unreadable value", []spanEnt{ok[0], {"p04", "x", "garbage"}}},
	} {
		refused(c.what, encodeSpanStream(testSpan, spanGroup, 1, c.ents), testSpan, spanGroup)
	}
	// A stream past one staging batch, cut in its last entity: what was
	// staged before the cut goes too.
	var big []spanEnt
	pad := strings.Repeat("z", 60<<10)
	for i := range 24 {
		v := string(odata.AppendEncoded(nil, 1, []odata.Property{{Name: "Pad", Value: odata.StringValue(pad)}}))
		big = append(big, spanEnt{"p04", fmt.Sprintf("big%02d", i), v})
	}
	bigStream := encodeSpanStream(testSpan, spanGroup, 1, big)
	refused("a stream of several batches, cut", bigStream[:len(bigStream)-100], testSpan, spanGroup)
	if n := rawKeys(t, dst.s.db, []byte{nsStaged}, []byte{nsStaged + 1}); n != 0 {
		t.Fatalf("%d staged pairs left by the refusal of a long stream", n)
	}

	unknownTag := encodeSpanStream(testSpan, spanGroup, 1, ok[:1])
	unknownTag = bytes.Replace(unknownTag, []byte{0x01, 3, 'p', '0', '3'}, []byte{0x02, 3, 'p', '0', '3'}, 1)
	refused("an unknown record", unknownTag, testSpan, spanGroup)

	if got := viewOf(t, dst.s); got != before {
		t.Fatal("a refused stream changed the target")
	}
	wantApplied(t, dst.s, spanGroup, 5)
	if n := rawKeys(t, dst.s.db, []byte{nsStaged}, []byte{nsStaged + 1}); n != 0 {
		t.Fatalf("%d staged pairs left by refusals", n)
	}
	if err := checkPLRanges(context.Background(), dst.s); err != nil {
		t.Fatal(err)
	}
	// And the hand-made stream itself is taken.
	if _, err := dst.s.IngestSpan(spanGroup, testSpan, bytes.NewReader(encodeSpanStream(testSpan, spanGroup, 9, ok))); err != nil {
		t.Fatalf("a well-formed hand-made stream: %v", err)
	}
	got := fmtEntities(allEntities(t, dst.s, acct, spanTable), inSpan)
	if strings.Count(got, "\n") != 3 || !strings.HasPrefix(got, "p03/a@1000001 ") {
		t.Fatalf("after the hand-made stream, the span holds:\n%s", got)
	}
	wantApplied(t, dst.s, spanGroup, 9)
}

// TestSpanIngestChecked: the check of IngestSpanChecked runs before
// anything is staged; its error ends the ingest with the target exactly
// as it was (no staged pair, the old applied index), and a check that
// passes lets the stream in as IngestSpan would.
func TestSpanIngestChecked(t *testing.T) {
	src := newSpanSource(t, 3)
	dst := newSpanTarget(t, nil, 3)
	before := viewOf(t, dst.s)
	stream := spanStream(t, src.s, spanGroup, testSpan)
	errTaken := errors.New("taken")
	checks := 0
	_, err := dst.s.IngestSpanChecked(spanGroup, testSpan, bytes.NewReader(stream), func() error {
		checks++
		if n := rawKeys(t, dst.s.db, []byte{nsStaged}, []byte{nsStaged + 1}); n != 0 {
			t.Errorf("%d pairs staged before the check", n)
		}
		return errTaken
	})
	if !errors.Is(err, errTaken) || checks != 1 {
		t.Fatalf("a refusing check: %v after %d checks", err, checks)
	}
	if got := viewOf(t, dst.s); got != before {
		t.Fatal("a refused ingest changed the target")
	}
	wantApplied(t, dst.s, spanGroup, 5)
	applied, err := dst.s.IngestSpanChecked(spanGroup, testSpan, bytes.NewReader(stream), func() error { checks++; return nil })
	if err != nil || applied != srcApplied || checks != 2 {
		t.Fatalf("a passing check: applied %d, %v after %d checks", applied, err, checks)
	}
	if got, want := viewOf(t, dst.s).span, viewOf(t, src.s).span; got != want {
		t.Fatalf("after a passing check the span holds\n%s\nwant\n%s", got, want)
	}
}

// TestSpanIngestCrash: a crash at any fsync of an ingest (some clones also
// keep a random part of what was not synced) leaves the span as it was,
// with the old applied index, or as the stream has it, with the new one,
// never a mix; nothing outside the span changes, no staged pair or marker
// outlives the reopen, and the recounted range statistics are exact.
func TestSpanIngestCrash(t *testing.T) {
	ctx := context.Background()
	src := newSpanSource(t, 40)
	stream := spanStream(t, src.s, spanGroup, testSpan)
	want := viewOf(t, src.s)

	mem := vfs.NewMem()
	hook := &syncCloneFS{FS: mem, mem: mem, rng: rand.New(rand.NewPCG(5, 6))}
	lo := lsm.Options{FS: hook, MemTableSize: 16 << 10, TargetFileSize: 8 << 10, BlockSize: 512}
	dst := newSpanTarget(t, &Options{LSM: lo}, 40)
	before := viewOf(t, dst.s)

	hook.arm(true)
	if _, err := dst.s.IngestSpan(spanGroup, testSpan, bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	hook.acked.Store(true)
	hook.arm(false)
	hook.clones = append(hook.clones, dropClone{fs: mem.CrashClone(nil), acked: true})

	var sawOld, sawNew int
	for i, c := range hook.clones {
		what := fmt.Sprintf("clone %d (tails %v)", i, c.tails)
		opts := dst.opts
		opts.LSM.FS = c.fs
		s, err := open("db", &opts, tuning{})
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		got := viewOf(t, s)
		applied, err := s.AppliedIndex(spanGroup)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case got.span == before.span && applied == 5 && !c.acked:
			sawOld++
		case got.span == want.span && applied == srcApplied:
			sawNew++
		default:
			t.Fatalf("%s: the span is neither the old one nor the new one (applied index %d):\n%s", what, applied, got.span)
		}
		if got.rest != before.rest || got.others != before.others {
			t.Fatalf("%s: data outside the span changed", what)
		}
		if n := rawKeys(t, s.db, []byte{nsStaged}, []byte{nsStaged + 1}); n != 0 {
			t.Fatalf("%s: %d staged pairs left", what, n)
		}
		lo := []byte{nsMeta, metaSpanIngest}
		if n := rawKeys(t, s.db, lo, prefixSuccessor(lo)); n != 0 {
			t.Fatalf("%s: an ingest marker survived Open", what)
		}
		s.maintain(time.Second) // the recount after a crash
		if err := checkPLRanges(ctx, s); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d clones: %d old, %d new", len(hook.clones), sawOld, sawNew)
	if sawOld == 0 || sawNew < 2 {
		t.Fatalf("%d clones: %d with the old span, %d with the new one; want both", len(hook.clones), sawOld, sawNew)
	}
}

// TestSpanIngestRollForward: a crash after the marker, with the span
// half cleared on disk, is finished by Open: the span is the new one.
// A marker whose table was dropped since is discarded.
// stageMarked stages stream, of testSpan of spanGroup, in s and writes
// its marker, synced, as an ingest does before its move: what a crash
// or a failed move leaves for Open or the next ingest to finish. It
// returns the span's table.
func stageMarked(t *testing.T, s *Store, stream []byte) *table {
	t.Helper()
	tb, err := s.lookupTable(acct, spanTable)
	if err != nil {
		t.Fatal(err)
	}
	m := spanIngest{group: spanGroup, tableID: tb.id, account: acct, low: spanLow, high: spanHigh}
	if m.applied, m.merged, err = s.stageSpan(spanGroup, testSpan, bytes.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(groupMetaKey(metaSpanIngest, spanGroup), m.encode(), s.syncWO); err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestSpanIngestRollForward(t *testing.T) {
	src := newSpanSource(t, 6)
	stream := spanStream(t, src.s, spanGroup, testSpan)
	want := viewOf(t, src.s)
	dst := newSpanTarget(t, nil, 6)
	before := viewOf(t, dst.s)

	s := dst.s
	tb := stageMarked(t, s, stream)
	// Half of the span's entities deleted, synced: a mix on disk.
	lo, hi := spanBounds(tb.prefix, testSpan)
	it := s.db.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	b := s.db.NewBatch()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%2 == 0 {
			b.Delete(it.Key())
		}
	}
	it.Close()
	if err := s.db.Apply(b, s.syncWO); err != nil {
		t.Fatal(err)
	}
	crashed := dst.crashClone()

	// The table dropped after the marker: Open drops the marker instead.
	if err := s.DeleteTable(context.Background(), acct, spanTable); err != nil {
		t.Fatal(err)
	}
	dropped := dst.crashClone()

	crashed.open()
	defer crashed.s.Close()
	got := viewOf(t, crashed.s)
	if got.span != want.span || got.rest != before.rest || got.others != before.others {
		t.Fatalf("after the roll forward, the span is:\n%s", got.span)
	}
	wantApplied(t, crashed.s, spanGroup, srcApplied)
	crashed.s.maintain(time.Second)
	if err := checkPLRanges(context.Background(), crashed.s); err != nil {
		t.Fatal(err)
	}

	dropped.open()
	defer dropped.s.Close()
	for _, r := range [][2][]byte{{[]byte{nsStaged}, []byte{nsStaged + 1}}, {groupMetaKey(metaSpanIngest, 0), groupMetaKey(metaSpanIngest, 1<<63)}} {
		if n := rawKeys(t, dropped.s.db, r[0], r[1]); n != 0 {
			t.Fatalf("%d staged pairs or markers outlived the drop of their table", n)
		}
	}
	wantApplied(t, dropped.s, spanGroup, 5)
}

// TestSpanIngestAfterAFailedMove: an ingest whose move failed on a
// storage error leaves its marker on the live store; the group's next
// ingest finishes that one first (its staged pairs are not mistaken for
// leftovers), whether its own stream is then refused or taken.
func TestSpanIngestAfterAFailedMove(t *testing.T) {
	src := newSpanSource(t, 6)
	dst := newSpanTarget(t, nil, 6)
	s := dst.s
	// An ingest of the source's span, staged and marked but not moved.
	stageMarked(t, s, spanStream(t, src.s, spanGroup, testSpan))
	ents := []spanEnt{{"p04", "only", encodedValue(1)}}
	next := encodeSpanStream(testSpan, spanGroup, 77, ents)
	// A refused stream: the pending ingest is finished all the same.
	if _, err := s.IngestSpan(spanGroup, testSpan, bytes.NewReader(next[:len(next)-1])); !errors.Is(err, ErrBadSpanSnapshot) {
		t.Fatalf("a cut stream: %v", err)
	}
	if got, want := viewOf(t, s).span, viewOf(t, src.s).span; got != want {
		t.Fatalf("the pending ingest was not finished: the span holds\n%s", got)
	}
	wantApplied(t, s, spanGroup, srcApplied)
	if _, err := s.IngestSpan(spanGroup, testSpan, bytes.NewReader(next)); err != nil {
		t.Fatal(err)
	}
	if got := fmtEntities(allEntities(t, s, acct, spanTable), inSpan); !strings.HasPrefix(got, "p04/only@") || strings.Count(got, "\n") != 1 {
		t.Fatalf("the span holds:\n%s", got)
	}
	wantApplied(t, s, spanGroup, 77)
	if err := checkPLRanges(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2][]byte{{[]byte{nsStaged}, []byte{nsStaged + 1}}, {groupMetaKey(metaSpanIngest, 0), groupMetaKey(metaSpanIngest, 1<<63)}} {
		if n := rawKeys(t, s.db, r[0], r[1]); n != 0 {
			t.Fatalf("%d staged pairs or markers left", n)
		}
	}
}

// TestSnapshotGroupSpanChecksTheRecord: a leader's view of its group's
// span must be of the span the group records at the view's instant, not
// of one the leader read before a split or freeze that the view is past
// (its applied index would then vouch for a span the group no longer
// holds). A group with no record has its catalog span.
func TestSnapshotGroupSpanChecksTheRecord(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.createTableInGroup("Halves", 5)
	whole := Span{Account: acct, Table: "Halves"}
	low := Span{Account: acct, Table: "Halves", HighPartitionKey: "m"}
	high := Span{Account: acct, Table: "Halves", LowPartitionKey: "m"}
	snapshot := func(group uint64, sp Span) error {
		t.Helper()
		ss, err := e.s.SnapshotGroupSpan(group, sp, mustRecorded(t, e.s, group))
		if err == nil {
			ss.Close()
		}
		return err
	}
	if err := snapshot(5, whole); err != nil {
		t.Fatalf("the first group, no record: %v", err)
	}
	if err := e.s.SplitTableRange(ctx, acct, "Halves", 5, "m", 9); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SplitGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 11}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	if err := snapshot(5, whole); !errors.Is(err, ErrSpanChanged) {
		t.Fatalf("the span read before the split: %v, want ErrSpanChanged", err)
	}
	if err := snapshot(5, low); err != nil {
		t.Fatalf("the parent's span after the split: %v", err)
	}
	if err := snapshot(9, high); err != nil {
		t.Fatalf("the child's span: %v", err)
	}
	if err := e.s.FreezeGroupSpan(WithStamp(ctx, Stamp{Group: 9, Index: 20}), 9); err != nil {
		t.Fatal(err)
	}
	if err := snapshot(9, high); !errors.Is(err, ErrSpanChanged) {
		t.Fatalf("a frozen span: %v, want ErrSpanChanged", err)
	}
	// The left group merges the frozen right one, whose record goes: a
	// leader that read it before finds it gone.
	if err := e.s.MergeTableRange(ctx, acct, "Halves", 5, "m"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.MergeGroupSpan(WithStamp(ctx, Stamp{Group: 5, Index: 12}), 5, 9, "m"); err != nil {
		t.Fatal(err)
	}
	if ss, err := e.s.SnapshotGroupSpan(9, high, true); !errors.Is(err, ErrSpanChanged) {
		if err == nil {
			ss.Close()
		}
		t.Fatalf("a record gone since the read: %v, want ErrSpanChanged", err)
	}
	if err := snapshot(5, whole); err != nil {
		t.Fatalf("the left group's span after the merge: %v", err)
	}
	// SnapshotSpan itself takes any span of the table.
	ss, err := e.s.SnapshotSpan(5, whole)
	if err != nil {
		t.Fatal(err)
	}
	ss.Close()
}
