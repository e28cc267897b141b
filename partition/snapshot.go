package partition

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cespare/xxhash/v2"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// A store snapshot is the whole store as one stream (docs/snapshot.md): a
// cluster replica that fell behind what its peers' logs still hold is
// rebuilt from one. The stream is the store's key-value pairs in key
// order after a magic string, and ends in a count and a checksum of
// everything before it, so a cut or damaged stream is refused whole.

// snapshotMagic opens every stream; its last byte is the format version.
var snapshotMagic = []byte("TBLSNAP\x01")

// maxSnapshotPair bounds a key and a value read back: no key of the store
// is near 1 MiB, no value near 16 MiB (entities are at most 1 MiB).
const (
	maxSnapshotKey   = 1 << 20
	maxSnapshotValue = 16 << 20
)

// ErrBadSnapshot is wrapped by every refusal of a snapshot stream.
var ErrBadSnapshot = errors.New("partition: bad store snapshot")

// StoreSnapshot is a consistent view of the whole store, to stream.
type StoreSnapshot struct {
	snap *lsm.Snapshot
}

// Snapshot returns a view of the store as of now. The caller, which must
// not be writing concurrently if it wants the view to match a point of
// its own (a cluster's apply goroutine, between two commands), closes it.
func (s *Store) Snapshot() *StoreSnapshot { return &StoreSnapshot{snap: s.db.NewSnapshot()} }

// Close releases the view.
func (ss *StoreSnapshot) Close() error { return ss.snap.Close() }

// WriteTo streams the view. It returns the bytes written.
func (ss *StoreSnapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &checksumWriter{w: bufio.NewWriterSize(w, 256<<10), h: xxhash.New()}
	cw.Write(snapshotMagic)
	it := ss.snap.NewIter(nil)
	var count uint64
	var buf []byte
	for ok := it.First(); ok && cw.err == nil; ok = it.Next() {
		buf = binary.AppendUvarint(buf[:0], uint64(len(it.Key())))
		buf = append(buf, it.Key()...)
		buf = binary.AppendUvarint(buf, uint64(len(it.Value())))
		cw.Write(buf)
		cw.Write(it.Value())
		count++
	}
	if err := it.Close(); err != nil {
		return cw.n, fmt.Errorf("partition: snapshot: %w", err)
	}
	// The end: a zero-length key (no key is empty), the count, the sum.
	buf = binary.AppendUvarint(buf[:0], 0)
	buf = binary.BigEndian.AppendUint64(buf, count)
	cw.Write(buf)
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], cw.h.Sum64())
	cw.w.Write(sum[:]) // not summed: it is the sum
	cw.n += 8
	if cw.err == nil {
		cw.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, cw.err
}

type checksumWriter struct {
	w   io.Writer
	h   *xxhash.Digest
	n   int64
	err error
}

func (c *checksumWriter) Write(p []byte) {
	if c.err != nil {
		return
	}
	c.h.Write(p)
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

// restoringMarker is present in a store directory while a restore writes
// it: Open refuses such a directory, so a restore cut short is never
// taken for a store.
const restoringMarker = "RESTORING"

// RestoreSnapshot builds a store in dir (which must be missing or empty)
// from a snapshot stream, and opens it. The directory is marked while the
// stream is written and checked, and unmarked only once the whole stream
// has checked out and is synced: a failed or interrupted restore leaves a
// directory Open refuses, never a store with part of the snapshot. opts
// is as Open's.
func RestoreSnapshot(dir string, opts *Options, r io.Reader) (*Store, error) {
	o := opts.withDefaults()
	fs := o.LSM.FS
	if fs == nil {
		fs = vfs.Default()
	}
	if names, err := fs.List(dir); err == nil && len(names) > 0 {
		return nil, fmt.Errorf("partition: restore into %s: the directory is not empty", dir)
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("partition: restore: %w", err)
	}
	marker := filepath.Join(dir, restoringMarker)
	if err := writeSynced(fs, marker); err != nil {
		return nil, err
	}
	lo := o.LSM
	lo.FS = fs
	db, err := lsm.Open(dir, &lo)
	if err != nil {
		return nil, fmt.Errorf("partition: restore: %w", err)
	}
	if err := loadSnapshot(db, r); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := db.Close(); err != nil {
		return nil, fmt.Errorf("partition: restore: %w", err)
	}
	if err := fs.Remove(marker); err != nil {
		return nil, fmt.Errorf("partition: restore: %w", err)
	}
	if err := vfs.SyncDir(fs, dir); err != nil {
		return nil, fmt.Errorf("partition: restore: %w", err)
	}
	return Open(dir, opts)
}

// RemoveStore deletes the files of the store in dir (a store directory
// holds files only), leaving the directory empty.
func RemoveStore(fs vfs.FS, dir string) error {
	if fs == nil {
		fs = vfs.Default()
	}
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("partition: remove store %s: %w", dir, err)
	}
	for _, n := range names {
		if err := fs.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("partition: remove store %s: %w", dir, err)
		}
	}
	return vfs.SyncDir(fs, dir)
}

func writeSynced(fs vfs.FS, name string) error {
	f, err := fs.Create(name)
	if err != nil {
		return fmt.Errorf("partition: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = vfs.SyncDir(fs, filepath.Dir(name))
	}
	if err != nil {
		return fmt.Errorf("partition: write %s: %w", name, err)
	}
	return nil
}

// loadSnapshot writes a stream's pairs into db, synced at the end, and
// refuses a stream that is cut, damaged, or out of key order.
func loadSnapshot(db *lsm.DB, r io.Reader) error {
	sr := &summingReader{r: bufio.NewReaderSize(r, 256<<10), h: xxhash.New()}
	magic := make([]byte, len(snapshotMagic))
	if err := sr.readFull(magic); err != nil || string(magic) != string(snapshotMagic) {
		return fmt.Errorf("%w: no snapshot header", ErrBadSnapshot)
	}
	var (
		b          = db.NewBatch()
		count      uint64
		last       []byte
		key, value []byte
	)
	for {
		klen, err := sr.uvarint()
		if err != nil {
			return fmt.Errorf("%w: cut after %d pairs", ErrBadSnapshot, count)
		}
		if klen == 0 {
			break
		}
		if klen > maxSnapshotKey {
			return fmt.Errorf("%w: pair %d: a key of %d bytes", ErrBadSnapshot, count, klen)
		}
		key = grow(key, int(klen))
		if err := sr.readFull(key); err != nil {
			return fmt.Errorf("%w: cut in pair %d", ErrBadSnapshot, count)
		}
		vlen, err := sr.uvarint()
		if err != nil || vlen > maxSnapshotValue {
			return fmt.Errorf("%w: pair %d: bad value length", ErrBadSnapshot, count)
		}
		value = grow(value, int(vlen))
		if err := sr.readFull(value); err != nil {
			return fmt.Errorf("%w: cut in pair %d", ErrBadSnapshot, count)
		}
		if last != nil && string(key) <= string(last) {
			return fmt.Errorf("%w: pair %d is out of key order", ErrBadSnapshot, count)
		}
		last = append(last[:0], key...)
		b.Set(key, value)
		count++
		if b.Size() >= 4<<20 {
			if err := db.Apply(b, &lsm.WriteOptions{Sync: false}); err != nil {
				return fmt.Errorf("partition: restore: %w", err)
			}
			b = db.NewBatch()
		}
	}
	var n [8]byte
	if err := sr.readFull(n[:]); err != nil || binary.BigEndian.Uint64(n[:]) != count {
		return fmt.Errorf("%w: the stream's count does not match its %d pairs", ErrBadSnapshot, count)
	}
	want := sr.h.Sum64()
	var sum [8]byte
	if _, err := io.ReadFull(sr.r, sum[:]); err != nil || binary.BigEndian.Uint64(sum[:]) != want {
		return fmt.Errorf("%w: checksum mismatch", ErrBadSnapshot)
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: bytes past the checksum", ErrBadSnapshot)
	}
	if err := db.Apply(b, &lsm.WriteOptions{Sync: true}); err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}
	return nil
}

// summingReader reads a stream and sums exactly the bytes it hands out.
type summingReader struct {
	r *bufio.Reader
	h *xxhash.Digest
}

func (s *summingReader) readFull(p []byte) error {
	if _, err := io.ReadFull(s.r, p); err != nil {
		return err
	}
	s.h.Write(p)
	return nil
}

func (s *summingReader) uvarint() (uint64, error) {
	var buf [binary.MaxVarintLen64]byte
	for i := range buf {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, err
		}
		buf[i] = c
		if c < 0x80 {
			s.h.Write(buf[:i+1])
			v, n := binary.Uvarint(buf[:i+1])
			if n <= 0 {
				return 0, ErrBadSnapshot
			}
			return v, nil
		}
	}
	return 0, ErrBadSnapshot
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
