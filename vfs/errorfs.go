package vfs

// ErrorFS: a filesystem that fails on command.
//
// Storage fails in ways a test on a healthy disk never sees: a write
// returns EIO, a full disk returns ENOSPC after writing part of a buffer,
// an fsync reports that data already handed over was lost, a rename or a
// directory sync fails half-way through an atomic switch. ErrorFS wraps any
// FS and injects such failures where a test asks for them: on one kind of
// operation, on files whose path contains a pattern (".log", ".sst",
// "MANIFEST"), on the Nth matching call or with a probability drawn from a
// seeded source, once (a transient error) or on every later call (a dead
// disk). It counts and logs what it injected, so a test can tell a fault
// that fired and was survived from one that never fired.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Op is a filesystem operation a Fault can strike.
type Op uint8

// The operations of FS and File that faults can be injected into.
const (
	OpCreate   Op = iota + 1 // FS.Create, and FS.Reuse (matched on the new name)
	OpOpen                   // FS.Open
	OpRemove                 // FS.Remove
	OpRename                 // FS.Rename (matched on the new name)
	OpWrite                  // File.Write
	OpRead                   // File.Read and ReadAt
	OpSync                   // File.Sync of a file
	OpSyncDir                // File.Sync of a directory
	OpOpenDir                // FS.OpenDir
	OpList                   // FS.List
	OpStat                   // FS.Stat and File.Stat
	OpMkdirAll               // FS.MkdirAll
	OpLock                   // FS.Lock
	OpClose                  // File.Close (the file is closed all the same)
)

func (o Op) String() string {
	switch o {
	case OpCreate:
		return "create"
	case OpOpen:
		return "open"
	case OpRemove:
		return "remove"
	case OpRename:
		return "rename"
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	case OpSync:
		return "sync"
	case OpSyncDir:
		return "syncdir"
	case OpOpenDir:
		return "opendir"
	case OpList:
		return "list"
	case OpStat:
		return "stat"
	case OpMkdirAll:
		return "mkdirall"
	case OpLock:
		return "lock"
	case OpClose:
		return "close"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Fault describes an error to inject: into which operation, on which
// files, when, and what the caller sees.
type Fault struct {
	Op Op
	// Match selects the files by a substring of their path ("" = any):
	// ".log" for WAL segments, ".sst", "MANIFEST", "CURRENT". Directory
	// operations match on the directory's path.
	Match string
	// After lets that many matching calls succeed before the fault fires:
	// After: n-1 fails the nth.
	After int
	// Probability, when positive, fires the fault on each matching call
	// (past After) with that probability instead of on the first one.
	Probability float64
	// Err is the error returned; nil means EIO.
	Err error
	// Short makes a failing write write the first half of its buffer
	// before failing, as a full disk does. (The error is still returned:
	// a short write without one is what io.Writer forbids.)
	Short bool
	// Sticky keeps the fault firing on every later matching call; by
	// default it fires once and disarms, like a transient error.
	Sticky bool
	// Following, when set, holds the fault back (its calls neither
	// count nor fire) until a call of that op on a path containing
	// FollowingMatch: a directory sync after CURRENT's rename, say, and
	// not the one of a new WAL segment that a background goroutine may
	// make before it.
	Following      Op
	FollowingMatch string
}

// ErrorFS wraps a filesystem and injects the faults it is armed with.
// It is safe for concurrent use.
type ErrorFS struct {
	fs FS

	mu       sync.Mutex
	rng      *rand.Rand
	faults   []*armedFault
	injected int
	log      []string
}

type armedFault struct {
	Fault
	seen     int
	fired    bool
	followed bool // the call Following names was made
}

// NewErrorFS wraps fs; seed drives probabilistic faults.
func NewErrorFS(fs FS, seed uint64) *ErrorFS {
	return &ErrorFS{fs: fs, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Inject arms a fault.
func (e *ErrorFS) Inject(f Fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = append(e.faults, &armedFault{Fault: f})
}

// Disarm removes every fault; the filesystem is healthy again.
func (e *ErrorFS) Disarm() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = nil
}

// Injected returns how many faults have fired, and a line for each.
func (e *ErrorFS) Injected() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.injected, append([]string(nil), e.log...)
}

// strike reports the fault, if any, that fires on op on name.
func (e *ErrorFS) strike(op Op, name string) *Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.faults {
		if f.Following != 0 && !f.followed {
			f.followed = op == f.Following && strings.Contains(name, f.FollowingMatch)
			continue
		}
		if f.Op != op || !strings.Contains(name, f.Match) || (f.fired && !f.Sticky) {
			continue
		}
		f.seen++
		if f.seen <= f.After {
			continue
		}
		if f.Probability > 0 && e.rng.Float64() >= f.Probability {
			continue
		}
		f.fired = true
		e.injected++
		e.log = append(e.log, op.String()+" "+name)
		out := f.Fault
		if out.Err == nil {
			out.Err = syscall.EIO
		}
		return &out
	}
	return nil
}

func (e *ErrorFS) fail(op Op, name string) error {
	if f := e.strike(op, name); f != nil {
		return &os.PathError{Op: op.String(), Path: name, Err: f.Err}
	}
	return nil
}

// Create implements FS.
func (e *ErrorFS) Create(name string) (File, error) {
	if err := e.fail(OpCreate, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Create(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: name}, nil
}

// Reuse implements FS; it fails as Create does.
func (e *ErrorFS) Reuse(oldname, newname string) (File, error) {
	if err := e.fail(OpCreate, newname); err != nil {
		return nil, err
	}
	f, err := e.fs.Reuse(oldname, newname)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: newname}, nil
}

// Open implements FS.
func (e *ErrorFS) Open(name string) (File, error) {
	if err := e.fail(OpOpen, name); err != nil {
		return nil, err
	}
	f, err := e.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: name}, nil
}

// OpenDir implements FS.
func (e *ErrorFS) OpenDir(name string) (File, error) {
	if err := e.fail(OpOpenDir, name); err != nil {
		return nil, err
	}
	f, err := e.fs.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &errorFile{File: f, fs: e, name: name, dir: true}, nil
}

// Remove implements FS.
func (e *ErrorFS) Remove(name string) error {
	if err := e.fail(OpRemove, name); err != nil {
		return err
	}
	return e.fs.Remove(name)
}

// Rename implements FS.
func (e *ErrorFS) Rename(oldname, newname string) error {
	if err := e.fail(OpRename, newname); err != nil {
		return err
	}
	return e.fs.Rename(oldname, newname)
}

// MkdirAll implements FS.
func (e *ErrorFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := e.fail(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.fs.MkdirAll(dir, perm)
}

// List implements FS.
func (e *ErrorFS) List(dir string) ([]string, error) {
	if err := e.fail(OpList, dir); err != nil {
		return nil, err
	}
	return e.fs.List(dir)
}

// Stat implements FS.
func (e *ErrorFS) Stat(name string) (os.FileInfo, error) {
	if err := e.fail(OpStat, name); err != nil {
		return nil, err
	}
	return e.fs.Stat(name)
}

// Lock implements FS.
func (e *ErrorFS) Lock(name string) (io.Closer, error) {
	if err := e.fail(OpLock, name); err != nil {
		return nil, err
	}
	return e.fs.Lock(name)
}

type errorFile struct {
	File
	fs   *ErrorFS
	name string
	dir  bool
}

func (f *errorFile) Write(p []byte) (int, error) {
	if fault := f.fs.strike(OpWrite, f.name); fault != nil {
		n := 0
		if fault.Short && len(p) > 1 {
			n, _ = f.File.Write(p[:len(p)/2])
		}
		return n, &os.PathError{Op: "write", Path: f.name, Err: fault.Err}
	}
	return f.File.Write(p)
}

func (f *errorFile) Read(p []byte) (int, error) {
	if err := f.fs.fail(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.fail(OpRead, f.name); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *errorFile) Sync() error {
	op := OpSync
	if f.dir {
		op = OpSyncDir
	}
	if err := f.fs.fail(op, f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *errorFile) Stat() (os.FileInfo, error) {
	if err := f.fs.fail(OpStat, f.name); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *errorFile) Close() error {
	err := f.File.Close()
	if ferr := f.fs.fail(OpClose, f.name); ferr != nil && err == nil {
		err = ferr
	}
	return err
}
