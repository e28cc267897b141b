package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/tabuladb/tabula/lsm"
)

// Limits of stored access policies (Set Table ACL).
const (
	MaxSignedIdentifiers = 5
	MaxSignedIDLength    = 64
)

// SignedIdentifier is a stored access policy of a table: a service SAS
// naming ID gets Start, Expiry and Permission from it. Zero times and an
// empty Permission mean the policy leaves them to the SAS.
type SignedIdentifier struct {
	ID            string
	Start, Expiry time.Time
	Permission    string
}

// GetTableACL returns the table's stored access policies (none if never
// set).
func (s *Store) GetTableACL(ctx context.Context, account, table string) ([]SignedIdentifier, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := s.acquireTable(account, table)
	if err != nil {
		return nil, err
	}
	defer t.release()
	v, err := s.db.Get(idKey(nsACL, t.id))
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read ACL of %s: %w", table, err)
	}
	ids, err := decodeACL(v)
	if err != nil {
		return nil, fmt.Errorf("partition: ACL of %s: %w", table, err)
	}
	return ids, nil
}

// SetTableACL replaces the table's stored access policies: at most 5, IDs
// of 1 to 64 characters, unique; a violation is InvalidXmlDocument, as the
// service answers a policy list it cannot take. An empty list clears them.
func (s *Store) SetTableACL(ctx context.Context, account, table string, ids []SignedIdentifier) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ids) > MaxSignedIdentifiers {
		return serviceErrorf(CodeInvalidXMLDocument, msgInvalidXML, "(more than %d signed identifiers)", MaxSignedIdentifiers)
	}
	for i, id := range ids {
		if id.ID == "" || utf8.RuneCountInString(id.ID) > MaxSignedIDLength {
			return serviceErrorf(CodeInvalidXMLDocument, msgInvalidXML, "(signed identifier %q is not 1 to %d characters)", id.ID, MaxSignedIDLength)
		}
		for _, prev := range ids[:i] {
			if prev.ID == id.ID {
				return serviceErrorf(CodeInvalidXMLDocument, msgInvalidXML, "(signed identifier %q appears twice)", id.ID)
			}
		}
	}
	t, err := s.acquireTable(account, table)
	if err != nil {
		return err
	}
	defer t.release()
	key := idKey(nsACL, t.id)
	b := s.db.NewBatch()
	if len(ids) == 0 {
		b.Delete(key)
	} else {
		b.Set(key, encodeACL(ids))
	}
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: write ACL of %s: %w", table, err)
	}
	return nil
}

// ACL value (docs/keys.md): version 1 | uvarint count | count × (string ID |
// time Start | time Expiry | string Permission), where a string is a
// uvarint length and bytes, and a time a flag byte (0 zero, 1 set) then, if
// set, varint Unix seconds and uvarint nanoseconds.
const aclVersion = 1

func encodeACL(ids []SignedIdentifier) []byte {
	v := []byte{aclVersion}
	v = binary.AppendUvarint(v, uint64(len(ids)))
	str := func(s string) {
		v = binary.AppendUvarint(v, uint64(len(s)))
		v = append(v, s...)
	}
	tm := func(t time.Time) {
		if t.IsZero() {
			v = append(v, 0)
			return
		}
		v = append(v, 1)
		v = binary.AppendVarint(v, t.Unix())
		v = binary.AppendUvarint(v, uint64(t.Nanosecond()))
	}
	for _, id := range ids {
		str(id.ID)
		tm(id.Start)
		tm(id.Expiry)
		str(id.Permission)
	}
	return v
}

func decodeACL(v []byte) ([]SignedIdentifier, error) {
	bad := fmt.Errorf("partition: malformed ACL value: %w", lsm.ErrCorruption)
	if len(v) < 2 || v[0] != aclVersion {
		return nil, bad
	}
	off := 1
	uv := func() (uint64, bool) {
		x, n := binary.Uvarint(v[off:])
		if n <= 0 {
			return 0, false
		}
		off += n
		return x, true
	}
	str := func() (string, bool) {
		l, ok := uv()
		if !ok || l > uint64(len(v)-off) {
			return "", false
		}
		s := string(v[off : off+int(l)])
		off += int(l)
		return s, true
	}
	tm := func() (time.Time, bool) {
		if off >= len(v) {
			return time.Time{}, false
		}
		flag := v[off]
		off++
		if flag == 0 {
			return time.Time{}, true
		}
		sec, n := binary.Varint(v[off:])
		if flag != 1 || n <= 0 {
			return time.Time{}, false
		}
		off += n
		ns, ok := uv()
		if !ok || ns >= 1e9 {
			return time.Time{}, false
		}
		return time.Unix(sec, int64(ns)).UTC(), true
	}
	count, ok := uv()
	if !ok || count > MaxSignedIdentifiers {
		return nil, bad
	}
	ids := make([]SignedIdentifier, count)
	for i := range ids {
		var ok1, ok2, ok3, ok4 bool
		ids[i].ID, ok1 = str()
		ids[i].Start, ok2 = tm()
		ids[i].Expiry, ok3 = tm()
		ids[i].Permission, ok4 = str()
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, bad
		}
	}
	if off != len(v) {
		return nil, bad
	}
	return ids, nil
}

// GetServiceProperties returns the account's service properties as last
// set (the server stores its XML), or nil if never set.
func (s *Store) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := s.db.Get(propsKey(account))
	if errors.Is(err, lsm.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read service properties: %w", err)
	}
	return v, nil
}

// SetServiceProperties stores the account's service properties, opaque
// bytes to this package.
func (s *Store) SetServiceProperties(ctx context.Context, account string, props []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	b.Set(propsKey(account), props)
	if err := s.db.Apply(b, s.writeOptions(ctx, b)); err != nil {
		return fmt.Errorf("partition: write service properties: %w", err)
	}
	return nil
}
