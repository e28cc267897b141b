package partition

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// StoredEntity is an entity as stored: its keys, its commit Timestamp, its
// ETag and its stored value (odata's encoding: Timestamp and properties).
type StoredEntity struct {
	PartitionKey, RowKey string
	Timestamp            odata.DateTime
	Value                []byte
}

// ETag is the entity's ETag, a function of its Timestamp, or "" for a
// result without a version (a delete's). It is computed on demand: a
// query page in no-metadata JSON never needs it, and formatting it for
// every entity was a sixth of such a page's CPU.
func (e StoredEntity) ETag() string {
	if e.Timestamp == 0 {
		return ""
	}
	return etagOf(e.Timestamp)
}

// Entity decodes the stored value into an odata.Entity.
func (e *StoredEntity) Entity() (*odata.Entity, error) {
	ent := &odata.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}
	if err := odata.DecodeEntityBinary(e.Value, ent); err != nil {
		return nil, fmt.Errorf("partition: entity (%q, %q): %w", e.PartitionKey, e.RowKey, err)
	}
	return ent, nil
}

// OpKind is the kind of an entity write.
type OpKind uint8

// The entity writes of the service. IfMatch is "*" (any version) or an
// ETag the entity must still have.
//
//   - OpInsert: the entity must not exist (else EntityAlreadyExists).
//   - OpUpdate: replaces an existing entity; IfMatch is required.
//   - OpMerge: merges properties into an existing entity (properties not
//     named are kept); IfMatch is required.
//   - OpInsertOrReplace, OpInsertOrMerge: upserts, unconditional when
//     IfMatch is empty; with an IfMatch they act as OpUpdate and OpMerge
//     (so "If-Match: *" on a missing entity is ResourceNotFound, as the
//     service answers).
//   - OpDelete: removes an existing entity; IfMatch is required; only the
//     Entity's keys are used.
//
// A required IfMatch that is empty, or an ETag that does not match, is
// UpdateConditionNotSatisfied; a missing entity is ResourceNotFound.
const (
	OpInsert OpKind = iota + 1
	OpUpdate
	OpMerge
	OpInsertOrReplace
	OpInsertOrMerge
	OpDelete
)

func (k OpKind) String() string {
	switch k {
	case OpInsert:
		return "Insert"
	case OpUpdate:
		return "Update"
	case OpMerge:
		return "Merge"
	case OpInsertOrReplace:
		return "InsertOrReplace"
	case OpInsertOrMerge:
		return "InsertOrMerge"
	case OpDelete:
		return "Delete"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one entity write.
type Op struct {
	Kind    OpKind
	Entity  *odata.Entity
	IfMatch string
}

// checkOp validates an operation before any storage is read: its kind, and
// the entity (all of it for writes, the keys for deletes).
func checkOp(op *Op) error {
	if op.Entity == nil {
		return serviceErrorf(odata.CodeInvalidInput, msgInvalidInput, "(no entity)")
	}
	switch op.Kind {
	case OpDelete:
		if err := odata.ValidateKey(odata.PartitionKeyName, op.Entity.PartitionKey); err != nil {
			return err
		}
		return odata.ValidateKey(odata.RowKeyName, op.Entity.RowKey)
	case OpInsert, OpUpdate, OpMerge, OpInsertOrReplace, OpInsertOrMerge:
		return odata.ValidateEntity(op.Entity)
	}
	return serviceErrorf(odata.CodeInvalidInput, msgInvalidInput, "(unknown operation %v)", op.Kind)
}

// staged is a checked write waiting for its timestamp.
type staged struct {
	key     []byte
	pk, rk  string
	del     bool
	props   []odata.Property // the new properties (sets)
	existed bool
	oldSize int64          // key and value of the version replaced
	floor   odata.DateTime // Timestamp of the version replaced
	value   []byte         // encoded, once the timestamp is known
	ts      odata.DateTime
}

// prepare checks op's condition against the current stored value old (nil
// when the entity does not exist) and computes the new properties. The
// caller holds the partition's latch and read old with getLatched.
func prepare(op *Op, key, old []byte) (staged, error) {
	e := op.Entity
	w := staged{key: key, pk: e.PartitionKey, rk: e.RowKey, existed: old != nil}
	if w.existed {
		ts, err := odata.EncodedTimestamp(old)
		if err != nil {
			return w, fmt.Errorf("partition: stored entity (%q, %q): %w", w.pk, w.rk, err)
		}
		w.floor, w.oldSize = ts, int64(len(key)+len(old))
	}
	kind := op.Kind
	switch {
	case kind == OpInsert:
		if w.existed {
			return w, serviceError(CodeEntityAlreadyExists, msgEntityAlreadyExists)
		}
	case kind == OpUpdate || kind == OpMerge || kind == OpDelete || op.IfMatch != "":
		if op.IfMatch == "" {
			return w, serviceErrorf(CodeUpdateConditionNotSatisfied, msgConditionFailed, "(%s requires If-Match)", kind)
		}
		if !w.existed {
			return w, serviceError(CodeResourceNotFound, msgResourceNotFound)
		}
		if !etagMatches(op.IfMatch, w.floor) {
			return w, serviceError(CodeUpdateConditionNotSatisfied, msgConditionFailed)
		}
	}
	switch {
	case kind == OpDelete:
		w.del = true
	case (kind == OpMerge || kind == OpInsertOrMerge) && w.existed:
		_, props, err := odata.DecodeEncoded(old)
		if err != nil {
			return w, fmt.Errorf("partition: stored entity (%q, %q): %w", w.pk, w.rk, err)
		}
		w.props = mergeProperties(props, e.Properties)
		// A merge can grow an entity past the limits its parts respect.
		merged := odata.Entity{PartitionKey: w.pk, RowKey: w.rk, Properties: w.props}
		if err := odata.ValidateEntity(&merged); err != nil {
			return w, err
		}
	default:
		w.props = e.Properties
	}
	return w, nil
}

// mergeProperties overlays upd on props: named properties take the new
// value in place, new ones are appended in their order.
func mergeProperties(props, upd []odata.Property) []odata.Property {
	out := append(make([]odata.Property, 0, len(props)+len(upd)), props...)
	for _, p := range upd {
		found := false
		for i := range out {
			if out[i].Name == p.Name {
				out[i].Value, found = p.Value, true
				break
			}
		}
		if !found {
			out = append(out, p)
		}
	}
	return out
}

// stamp sets the write's timestamp and encodes its value.
func (w *staged) stamp(ts odata.DateTime) {
	w.ts = ts
	if !w.del {
		w.value = odata.AppendEncoded(nil, ts, w.props)
	}
}

// statDeltas returns the change in entity count and bytes the write makes.
func (w *staged) statDeltas() (entities, size int64) {
	switch {
	case w.del:
		return -1, -w.oldSize
	case w.existed:
		return 0, int64(len(w.key)+len(w.value)) - w.oldSize
	}
	return 1, int64(len(w.key) + len(w.value))
}

func (w *staged) result() StoredEntity {
	if w.del {
		return StoredEntity{PartitionKey: w.pk, RowKey: w.rk}
	}
	return StoredEntity{PartitionKey: w.pk, RowKey: w.rk, Timestamp: w.ts, Value: w.value}
}

// etagOf is odata.ETag with one allocation: it formats into a stack
// buffer (odata.ETag grows its slice from nil, allocating several times).
func etagOf(ts odata.DateTime) string {
	var buf [64]byte
	return string(odata.AppendETag(buf[:0], ts))
}

// etagMatches reports whether an If-Match value matches the ETag of an
// entity stored at ts: "*" always does; otherwise the weak datetime ETag is
// compared by its instant, so a client that decoded the percent-encoding
// (or sent a 7-digit fraction with fewer digits) still matches.
func etagMatches(ifMatch string, ts odata.DateTime) bool {
	if ifMatch == "*" || ifMatch == etagOf(ts) {
		return true
	}
	v := strings.TrimPrefix(strings.TrimPrefix(ifMatch, "W/"), "w/")
	v, ok := strings.CutPrefix(v, `"datetime'`)
	if !ok {
		return false
	}
	v, ok = strings.CutSuffix(v, `'"`)
	if !ok {
		return false
	}
	if u, err := url.PathUnescape(v); err == nil {
		v = u
	}
	t, ok := odata.ParseDateTime(v)
	return ok && t == ts
}

// getRaw reads a stored value at the current state; a missing key is nil.
func (s *Store) getRaw(key []byte) ([]byte, error) { return missingIsNil(s.db.Get(key)) }

// getLatched reads the value a write holding key's partition latch must
// check its condition against: the newest applied one, which may be the
// still pending (enqueued, not yet durable) write of the previous latch
// holder (lsm.DB.GetApplied). A missing key is nil.
func (s *Store) getLatched(key []byte) ([]byte, error) { return missingIsNil(s.db.GetApplied(key)) }

func missingIsNil(v []byte, err error) ([]byte, error) {
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read entity: %w", err)
	}
	return v, nil
}

// underLatch runs enqueue, which reads, checks and enqueues a commit,
// holding latch, and records the commit as the latch's last. A refusal
// from enqueue (a service error: a condition not met, an entity grown too
// large by a merge) may rest on a value getLatched read, which may be the
// still pending write of an earlier latch holder: it is answered only
// once the latch's last commit is committed, and becomes the storage
// failure if that (or anything before it) failed, so that no client is
// told about a write that was never acknowledged and may be lost. The
// wait is outside the latch, and only for this latch's writes.
func (s *Store) underLatch(l *latch, enqueue func() (lsm.PendingCommit, error)) (lsm.PendingCommit, error) {
	s.latch.acquire(l)
	p, err := enqueue()
	if err == nil {
		l.lastSeq = p.Seq()
	}
	last := l.lastSeq
	l.Unlock()
	if err == nil || ErrorCode(err) == "" {
		return p, err
	}
	if werr := s.db.WaitVisible(last); werr != nil {
		return p, fmt.Errorf("partition: commit of a preceding write: %w", werr)
	}
	return p, err
}

// Apply performs one entity write atomically: under the partition's latch
// it reads the entity, checks op's condition and enqueues the commit
// (synced) with a new timestamp; it then releases the latch and waits for
// the commit to be durable and visible, so that the writes queued on a
// busy partition share WAL fsyncs. The result holds the new version (for
// deletes, only the keys). The returned Value is the caller's.
func (s *Store) Apply(ctx context.Context, account, tableName string, op Op) (StoredEntity, error) {
	if err := ctx.Err(); err != nil {
		return StoredEntity{}, err
	}
	t, err := s.acquireTable(account, tableName)
	if err != nil {
		return StoredEntity{}, err
	}
	defer t.release()
	if err := checkOp(&op); err != nil {
		return StoredEntity{}, err
	}
	pk := op.Entity.PartitionKey
	key := AppendEntityKey(nil, account, t.id, pk, op.Entity.RowKey)

	// t.mu is held from before the commit until its statistics are
	// recorded (see recordWrite), across the durability wait.
	t.mu.RLock()
	defer t.mu.RUnlock()
	w, p, err := s.enqueueOp(ctx, t, account, key, &op)
	if err != nil {
		return StoredEntity{}, err
	}
	// Outside the latch. A failure here is also the failure of every write
	// enqueued after this one, including those that checked their
	// condition against it: the engine acknowledges none of them.
	if err := p.Wait(); err != nil {
		return StoredEntity{}, fmt.Errorf("partition: %s (%q, %q): %w", op.Kind, w.pk, w.rk, err)
	}
	dEnt, dBytes := w.statDeltas()
	t.recordWrite(pk, 1, dEnt, dBytes)
	return w.result(), nil
}

// enqueueOp is the part of Apply under the partition's latch: read, check,
// stamp and enqueue. The caller holds t.mu shared and must Wait on the
// result.
func (s *Store) enqueueOp(ctx context.Context, t *table, account string, key []byte, op *Op) (w staged, p lsm.PendingCommit, err error) {
	p, err = s.underLatch(s.latch.forPartition(account, t.id, op.Entity.PartitionKey), func() (lsm.PendingCommit, error) {
		old, err := s.getLatched(key)
		if err != nil {
			return lsm.PendingCommit{}, err
		}
		if w, err = prepare(op, key, old); err != nil {
			return lsm.PendingCommit{}, err
		}
		ts, err := s.commitTimestamps(ctx, 1, w.floor)
		if err != nil {
			return lsm.PendingCommit{}, err
		}
		w.stamp(ts)
		var b lsm.Batch
		if w.del {
			b.Delete(key)
		} else {
			b.Set(key, w.value)
		}
		p, err := s.db.Enqueue(&b, s.writeOptions(ctx, &b))
		if err != nil {
			return p, fmt.Errorf("partition: %s (%q, %q): %w", op.Kind, w.pk, w.rk, err)
		}
		return p, nil
	})
	return w, p, err
}

// InsertEntity inserts e; it must not exist.
func (s *Store) InsertEntity(ctx context.Context, account, table string, e *odata.Entity) (StoredEntity, error) {
	return s.Apply(ctx, account, table, Op{Kind: OpInsert, Entity: e})
}

// UpdateEntity replaces an existing entity whose ETag matches ifMatch ("*"
// for any).
func (s *Store) UpdateEntity(ctx context.Context, account, table string, e *odata.Entity, ifMatch string) (StoredEntity, error) {
	return s.Apply(ctx, account, table, Op{Kind: OpUpdate, Entity: e, IfMatch: ifMatch})
}

// MergeEntity merges e's properties into an existing entity whose ETag
// matches ifMatch ("*" for any).
func (s *Store) MergeEntity(ctx context.Context, account, table string, e *odata.Entity, ifMatch string) (StoredEntity, error) {
	return s.Apply(ctx, account, table, Op{Kind: OpMerge, Entity: e, IfMatch: ifMatch})
}

// InsertOrReplaceEntity writes e whether or not it exists.
func (s *Store) InsertOrReplaceEntity(ctx context.Context, account, table string, e *odata.Entity) (StoredEntity, error) {
	return s.Apply(ctx, account, table, Op{Kind: OpInsertOrReplace, Entity: e})
}

// InsertOrMergeEntity merges e into the entity, inserting it if missing.
func (s *Store) InsertOrMergeEntity(ctx context.Context, account, table string, e *odata.Entity) (StoredEntity, error) {
	return s.Apply(ctx, account, table, Op{Kind: OpInsertOrMerge, Entity: e})
}

// DeleteEntity deletes an existing entity whose ETag matches ifMatch ("*"
// for any).
func (s *Store) DeleteEntity(ctx context.Context, account, table, pk, rk, ifMatch string) error {
	_, err := s.Apply(ctx, account, table, Op{Kind: OpDelete, Entity: &odata.Entity{PartitionKey: pk, RowKey: rk}, IfMatch: ifMatch})
	return err
}

// GetEntity reads one entity at the current state; a missing one is
// ResourceNotFound. The returned Value is the caller's.
func (s *Store) GetEntity(ctx context.Context, account, table, pk, rk string) (StoredEntity, error) {
	if err := ctx.Err(); err != nil {
		return StoredEntity{}, err
	}
	t, err := s.acquireTable(account, table)
	if err != nil {
		return StoredEntity{}, err
	}
	defer t.release()
	t.recordRead(pk, 1)
	v, err := s.getRaw(AppendEntityKey(nil, account, t.id, pk, rk))
	if err != nil {
		return StoredEntity{}, err
	}
	if v == nil {
		return StoredEntity{}, serviceError(CodeResourceNotFound, msgResourceNotFound)
	}
	ts, err := odata.EncodedTimestamp(v)
	if err != nil {
		return StoredEntity{}, fmt.Errorf("partition: stored entity (%q, %q): %w", pk, rk, err)
	}
	return StoredEntity{PartitionKey: pk, RowKey: rk, Timestamp: ts, Value: v}, nil
}
