package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// NewMem returns an empty in-memory filesystem, for tests and fuzzing.
// Paths are cleaned with filepath.Clean; directories exist once MkdirAll
// named them.
//
// It also keeps what a power loss would leave (see CrashClone in
// crashclone.go): a file's data as of its last Sync, and each directory's
// entries as of its last sync through OpenDir, as a POSIX filesystem
// promises and no more.
func NewMem() *MemFS {
	return &MemFS{
		files:       map[string]*memFile{},
		durable:     map[string]*memFile{},
		dirs:        map[string]bool{rootDir: true, ".": true},
		durableDirs: map[string]bool{rootDir: true, ".": true},
	}
}

// rootDir is "/" as filepath.Clean writes it: `\` on Windows.
var rootDir = filepath.Clean("/")

// MemFS is the in-memory filesystem NewMem returns.
type MemFS struct {
	mu    sync.Mutex
	files map[string]*memFile
	dirs  map[string]bool
	locks map[string]bool
	// durable and durableDirs are the files and directories whose names a
	// crash would keep: those present at their parent's last sync.
	durable     map[string]*memFile
	durableDirs map[string]bool
}

// memFile is a file's content, shared by every handle open on it.
//
// A reused file (Reuse) is written from its start over what it held:
// under is that, data what was written since, so the file reads as data
// followed by the rest of under. Its old content counts as durable (Reuse
// takes only files synced whole), the writes as far as they were synced.
type memFile struct {
	mu     sync.RWMutex
	data   []byte
	synced int // the length of data as of the last Sync
	under  []byte
}

// memHandle is an open file: a position for Read, and the content.
type memHandle struct {
	fs       *MemFS
	name     string
	f        *memFile
	pos      int64
	writable bool
	dir      bool
	closed   bool
}

// Bytes returns the memory its files' contents take, those a crash would
// bring back included: what a test's disk costs the process's heap, which
// a test measuring the heap subtracts.
func (m *MemFS) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	seen := map[*memFile]bool{}
	for _, files := range []map[string]*memFile{m.files, m.durable} {
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				f.mu.RLock()
				n += int64(cap(f.data) + cap(f.under))
				f.mu.RUnlock()
			}
		}
	}
	return n
}

func (m *MemFS) Create(name string) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[filepath.Dir(name)] {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrNotExist}
	}
	f := &memFile{}
	m.files[name] = f
	return &memHandle{fs: m, name: name, f: f, writable: true}, nil
}

func (m *MemFS) Open(name string) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memHandle{fs: m, name: name, f: f}, nil
}

func (m *MemFS) OpenDir(name string) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memHandle{fs: m, name: name, f: &memFile{}, dir: true}, nil
}

func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.files, name)
	return nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[oldname]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	delete(m.files, oldname)
	m.files[newname] = f
	return nil
}

// Reuse implements FS. The file keeps its identity, as an inode does: a
// handle still open on it, and a name a crash would still keep, see the
// writes that replace its content.
func (m *MemFS) Reuse(oldname, newname string) (File, error) {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[oldname]
	if !ok {
		return nil, &os.LinkError{Op: "reuse", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	delete(m.files, oldname)
	m.files[newname] = f
	f.mu.Lock()
	f.under, f.data, f.synced = f.contentLocked(), nil, 0
	f.mu.Unlock()
	return &memHandle{fs: m, name: newname, f: f, writable: true}, nil
}

// contentLocked returns the file's bytes: data, then what under holds
// past it. Called with f.mu held.
func (f *memFile) contentLocked() []byte {
	if len(f.under) <= len(f.data) {
		return f.data
	}
	return append(bytes.Clone(f.data), f.under[len(f.data):]...)
}

func (m *MemFS) MkdirAll(dir string, _ os.FileMode) error {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; !m.dirs[d]; d = filepath.Dir(d) {
		m.dirs[d] = true
	}
	return nil
}

func (m *MemFS) List(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for name := range m.files {
		if filepath.Dir(name) == dir {
			names = append(names, filepath.Base(name))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	f, ok := m.files[name]
	m.mu.Unlock()
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: filepath.Base(name), size: f.size()}, nil
}

func (m *MemFS) Lock(name string) (io.Closer, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks == nil {
		m.locks = map[string]bool{}
	}
	if m.locks[name] {
		return nil, fmt.Errorf("lock %s: already held", name)
	}
	m.locks[name] = true
	if _, ok := m.files[name]; !ok {
		m.files[name] = &memFile{}
	}
	return lockCloser(func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.locks, name)
		return nil
	}), nil
}

type lockCloser func() error

func (c lockCloser) Close() error { return c() }

func (f *memFile) size() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return int64(max(len(f.data), len(f.under)))
}

var errClosed = errors.New("vfs: file closed")

func (h *memHandle) Read(p []byte) (int, error) {
	n, err := h.ReadAt(p, h.pos)
	h.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (h *memHandle) ReadAt(p []byte, off int64) (int, error) {
	if h.closed {
		return 0, errClosed
	}
	if off < 0 {
		return 0, fmt.Errorf("vfs: negative offset %d", off)
	}
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	data, under := h.f.data, h.f.under
	if off >= int64(max(len(data), len(under))) {
		return 0, io.EOF
	}
	n := 0
	if off < int64(len(data)) {
		n = copy(p, data[off:])
	}
	if end := off + int64(n); n < len(p) && end < int64(len(under)) {
		n += copy(p[n:], under[end:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *memHandle) Write(p []byte) (int, error) {
	if h.closed {
		return 0, errClosed
	}
	if !h.writable {
		return 0, fmt.Errorf("vfs: %s: opened read-only", h.name)
	}
	h.f.mu.Lock()
	h.f.data = append(h.f.data, p...)
	h.f.mu.Unlock()
	return len(p), nil
}

func (h *memHandle) Sync() error {
	if h.closed {
		return errClosed
	}
	if h.dir {
		h.fs.syncDir(h.name)
		return nil
	}
	h.f.mu.Lock()
	h.f.synced = len(h.f.data)
	h.f.mu.Unlock()
	return nil
}

func (h *memHandle) Stat() (os.FileInfo, error) {
	return memInfo{name: filepath.Base(h.name), size: h.f.size()}, nil
}

func (h *memHandle) Close() error {
	if h.closed {
		return errClosed
	}
	h.closed = true
	return nil
}

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() os.FileMode  { return 0o600 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
