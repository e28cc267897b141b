// Package backup turns an engine checkpoint (lsm.DB.Checkpoint) into a
// backup directory and back into a store: it seals a checkpoint with an
// index file, BACKUP, that lists every file with its size and xxhash64
// checksum, checks a backup against it, and restores one into a new store
// directory without ever leaving a half-written store behind.
//
// A backup directory is an ordinary store directory (CURRENT, a MANIFEST,
// sstables and WAL segments) plus BACKUP. docs/backup.md describes the
// layout and the index format, version 1.
package backup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
)

// IndexName is the name of the index file in a backup directory.
const IndexName = "BACKUP"

// FormatVersion is the version of the index format this package writes
// and the only one it reads.
const FormatVersion = 1

// magic starts the index's first line.
const magic = "tabula-backup"

// maxIndexSize bounds the index a reader accepts: it lists a store's files,
// a few dozen bytes each.
const maxIndexSize = 64 << 20

// File is one file of a backup.
type File struct {
	Name   string
	Size   int64
	XXHash uint64
}

// Index is the content of BACKUP.
type Index struct {
	Version int
	Seq     uint64 // the checkpoint's sequence number
	Files   []File // sorted by name
}

// Error locates a problem in a backup: the file, and the line (of BACKUP)
// or byte offset (of a data file, when HasOffset) where it is; neither
// when the file as a whole is the problem.
type Error struct {
	File      string
	Line      int
	Offset    int64
	HasOffset bool
	Err       error
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0:
		return fmt.Sprintf("%s: line %d: %v", e.File, e.Line, e.Err)
	case e.HasOffset:
		return fmt.Sprintf("%s: offset %d: %v", e.File, e.Offset, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrCorrupt is wrapped by every error about a damaged or malformed backup.
var ErrCorrupt = errors.New("backup is damaged or malformed")

// Encode returns the index file's bytes:
//
//	tabula-backup 1
//	seq <decimal>
//	file <name> <size> <xxhash64, 16 hex digits>     (one per file, by name)
//	end <xxhash64 of every byte above, 16 hex digits>
func (x *Index) Encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d\n", magic, FormatVersion)
	fmt.Fprintf(&b, "seq %d\n", x.Seq)
	for _, f := range x.Files {
		fmt.Fprintf(&b, "file %s %d %016x\n", f.Name, f.Size, f.XXHash)
	}
	fmt.Fprintf(&b, "end %016x\n", xxhash.Sum64(b.Bytes()))
	return b.Bytes()
}

// ParseIndex parses an index file's bytes. Errors name the line.
func ParseIndex(data []byte) (*Index, error) {
	x := &Index{}
	bad := func(line int, format string, args ...any) (*Index, error) {
		return nil, &Error{File: IndexName, Line: line, Err: fmt.Errorf(format+": %w", append(args, ErrCorrupt)...)}
	}
	if len(data) > maxIndexSize {
		return bad(0, "%d bytes, more than an index can be", len(data))
	}
	var (
		pos   int
		ended bool
	)
	for n := 1; pos < len(data); n++ {
		if ended {
			return bad(n, "text after the end line")
		}
		nl := bytes.IndexByte(data[pos:], '\n')
		if nl < 0 {
			return bad(n, "truncated: the line has no newline")
		}
		line := string(data[pos : pos+nl])
		lineStart := pos
		pos += nl + 1
		fields := strings.Split(line, " ")
		switch {
		case n == 1:
			if len(fields) != 2 || fields[0] != magic {
				return bad(n, "not a tabula backup index (want %q)", magic+" <version>")
			}
			v, err := strconv.Atoi(fields[1])
			if err != nil || v < 1 {
				return bad(n, "bad version %q", fields[1])
			}
			if v != FormatVersion {
				return bad(n, "format version %d; this build reads version %d", v, FormatVersion)
			}
			x.Version = v
		case n == 2:
			if len(fields) != 2 || fields[0] != "seq" {
				return bad(n, "want %q", "seq <sequence number>")
			}
			seq, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return bad(n, "bad sequence number %q", fields[1])
			}
			x.Seq = seq
		case fields[0] == "file":
			if len(fields) != 4 {
				return bad(n, "want %q", "file <name> <size> <xxhash64>")
			}
			f := File{Name: fields[1]}
			if !validName(f.Name) {
				return bad(n, "bad file name %q", f.Name)
			}
			size, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil || size < 0 {
				return bad(n, "bad size %q", fields[2])
			}
			f.Size = size
			var ok bool
			if f.XXHash, ok = parseChecksum(fields[3]); !ok {
				return bad(n, "bad checksum %q", fields[3])
			}
			if k := len(x.Files); k > 0 && x.Files[k-1].Name >= f.Name {
				return bad(n, "file %q is out of order or listed twice", f.Name)
			}
			x.Files = append(x.Files, f)
		case fields[0] == "end":
			if len(fields) != 2 {
				return bad(n, "want %q", "end <xxhash64>")
			}
			sum, ok := parseChecksum(fields[1])
			if !ok {
				return bad(n, "bad checksum %q", fields[1])
			}
			if got := xxhash.Sum64(data[:lineStart]); got != sum {
				return bad(n, "checksum mismatch: the lines above hash to %016x, the end line says %016x", got, sum)
			}
			ended = true
		default:
			return bad(n, "unknown line %q", truncate(line, 40))
		}
	}
	if !ended {
		return bad(0, "truncated: no end line")
	}
	return x, nil
}

// parseChecksum reads a checksum as the index writes it: 16 lower-case
// hex digits, the one spelling, so an index that parses writes back byte
// for byte.
func parseChecksum(s string) (uint64, bool) {
	if len(s) != 16 || strings.ContainsFunc(s, func(c rune) bool { return (c < '0' || c > '9') && (c < 'a' || c > 'f') }) {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 64)
	return v, err == nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// validName accepts the names of a store's files: no separators, nothing
// that could leave the directory.
func validName(name string) bool {
	if name == "" || name == "." || name == ".." || name == IndexName || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '/' || c == '\\' || c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// Seal finishes a checkpoint written into dir: it verifies it as a store
// (lsm.Verify), then writes BACKUP listing every file with its checksum,
// synced. seq is the checkpoint's sequence number.
func Seal(dir string, seq uint64) (*Index, error) {
	if _, err := lsm.Verify(dir, nil); err != nil {
		return nil, fmt.Errorf("backup: the checkpoint does not verify: %w", err)
	}
	os.Remove(filepath.Join(dir, "LOCK")) // made by Verify; not part of a store's data
	names, err := listFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	x := &Index{Version: FormatVersion, Seq: seq}
	for _, name := range names {
		f, err := hashFile(filepath.Join(dir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		f.Name = name
		x.Files = append(x.Files, f)
	}
	if err := writeFileSynced(filepath.Join(dir, IndexName), x.Encode()); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return x, nil
}

// listFiles returns the names of the regular files of dir, sorted, except
// BACKUP and LOCK; a subdirectory or other special file is an error.
func listFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Name() == IndexName || e.Name() == "LOCK" {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", filepath.Join(dir, e.Name()))
		}
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// hashFile reads the file at path, copying it to w if w is not nil, and
// returns its size and checksum.
func hashFile(path string, w io.Writer) (File, error) {
	in, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	h := xxhash.New()
	var dst io.Writer = h
	if w != nil {
		dst = io.MultiWriter(h, w)
	}
	n, err := io.Copy(dst, bufio.NewReaderSize(in, 1<<20))
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", path, err)
	}
	return File{Size: n, XXHash: h.Sum64()}, nil
}

// ReadIndex reads and parses dir's BACKUP.
func ReadIndex(dir string) (*Index, error) {
	path := filepath.Join(dir, IndexName)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("backup: %s is not a backup: %w", dir, err)
	}
	x, err := ParseIndex(data)
	if err != nil {
		var be *Error
		if errors.As(err, &be) {
			be.File = path
		}
		return nil, fmt.Errorf("backup: %w", err)
	}
	return x, nil
}

// Check reads every file of the backup in dir and compares it with BACKUP:
// every listed file present with its size and checksum, and no other file.
func Check(dir string) (*Index, error) {
	x, err := ReadIndex(dir)
	if err != nil {
		return nil, err
	}
	if err := checkFiles(dir, x, nil); err != nil {
		return nil, err
	}
	return x, nil
}

// checkFiles checks dir's files against x; with copyTo set, it also copies
// each file into copyTo (synced) as it reads it.
func checkFiles(dir string, x *Index, copyTo *string) error {
	names, err := listFiles(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	listed := map[string]bool{}
	for _, f := range x.Files {
		listed[f.Name] = true
	}
	for _, name := range names {
		if !listed[name] {
			return fmt.Errorf("backup: %w", &Error{File: filepath.Join(dir, name), Err: fmt.Errorf("not listed in %s: %w", IndexName, ErrCorrupt)})
		}
	}
	for _, want := range x.Files {
		path := filepath.Join(dir, want.Name)
		var (
			got File
			err error
		)
		if copyTo != nil {
			got, err = copyHashed(path, filepath.Join(*copyTo, want.Name))
		} else {
			got, err = hashFile(path, nil)
		}
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("backup: %w", &Error{File: path, Err: fmt.Errorf("listed in %s but missing: %w", IndexName, ErrCorrupt)})
			}
			return fmt.Errorf("backup: %w", err)
		}
		switch {
		case got.Size != want.Size:
			return fmt.Errorf("backup: %w", &Error{File: path, Offset: min(got.Size, want.Size), HasOffset: true, Err: fmt.Errorf("%d bytes, %s says %d (truncated or extended): %w", got.Size, IndexName, want.Size, ErrCorrupt)})
		case got.XXHash != want.XXHash:
			e := &Error{File: path, Err: fmt.Errorf("checksum %016x, %s says %016x: %w", got.XXHash, IndexName, want.XXHash, ErrCorrupt)}
			// The store's own checksums can say where the damage is.
			_, verr := lsm.Verify(dir, nil)
			os.Remove(filepath.Join(dir, "LOCK"))
			var ve *lsm.VerifyError
			if errors.As(verr, &ve) && ve.File == path && ve.Offset >= 0 {
				e.Offset, e.HasOffset = ve.Offset, true
				e.Err = fmt.Errorf("checksum %016x, %s says %016x; the store's checksums find damage at offset %d (%v): %w", got.XXHash, IndexName, want.XXHash, ve.Offset, ve.Err, ErrCorrupt)
			}
			return fmt.Errorf("backup: %w", e)
		}
	}
	return nil
}

func copyHashed(src, dst string) (File, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return File{}, err
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	f, err := hashFile(src, bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return f, err
}

// Restore copies the backup in src into a new store directory dst, which
// must not exist or be an empty directory. It checks every file against
// BACKUP as it copies, into a temporary directory beside dst, verifies the
// copy as a store (lsm.Verify) and only then renames it to dst, so dst
// never holds a partial store: after a failure or a crash it is as before
// (a leftover temporary directory, named .<dst>.restore-*, may remain after
// a crash).
func Restore(src, dst string) (*Index, error) {
	dst = filepath.Clean(dst)
	if entries, err := os.ReadDir(dst); err == nil {
		if len(entries) > 0 {
			return nil, fmt.Errorf("backup: restore into %s: the directory is not empty (%d entries); restore into a new directory", dst, len(entries))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("backup: restore into %s: %w", dst, err)
	}
	x, err := ReadIndex(src)
	if err != nil {
		return nil, err
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("backup: restore into %s: %w", dst, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".restore-")
	if err != nil {
		return nil, fmt.Errorf("backup: restore into %s: %w", dst, err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := checkFiles(src, x, &tmp); err != nil {
		return nil, err
	}
	if _, err := lsm.Verify(tmp, nil); err != nil {
		return nil, fmt.Errorf("backup: the restored copy does not verify: %w", err)
	}
	os.Remove(filepath.Join(tmp, "LOCK"))
	if err := syncDir(tmp); err != nil {
		return nil, fmt.Errorf("backup: restore into %s: %w", dst, err)
	}
	// rename(2) replaces an empty directory; a non-empty one (someone
	// wrote into dst meanwhile) makes it fail, which is what we want.
	if err := os.Rename(tmp, dst); err != nil {
		return nil, fmt.Errorf("backup: restore into %s: %w", dst, err)
	}
	done = true
	if err := syncDir(parent); err != nil {
		return nil, fmt.Errorf("backup: restore into %s: %w", dst, err)
	}
	return x, nil
}

func writeFileSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error { return vfs.SyncDir(vfs.Default(), dir) }
