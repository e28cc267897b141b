package cluster

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// A node keeps its replica of the store in a directory store-N of its
// data directory, named by the small file STORE. Installing a snapshot
// restores it into store-N+1 and then switches STORE, a file replaced
// atomically (written aside, synced, renamed, the directory synced): a
// crash leaves the old store or the new one, never a mix. STORE also
// records the snapshot (index, term and conf state) the store was
// restored from, so a node that crashed after the switch but before its
// raft log recorded the snapshot can record it on restart.

// storePointerFile names the live store directory.
const storePointerFile = "STORE"

// storePointer is STORE's content.
type storePointer struct {
	n    int                      // the store is in store-n
	snap *raftpb.SnapshotMetadata // the snapshot it was restored from; nil for none
}

func (p storePointer) dir(dataDir string) string {
	return filepath.Join(dataDir, "store-"+strconv.Itoa(p.n))
}

// encode writes the pointer: a header line, then "dir N" and, for a
// restored store, its snapshot line.
func (p storePointer) encode() ([]byte, error) {
	s := fmt.Sprintf("tabula-store 1\ndir %d\n", p.n)
	if p.snap != nil {
		line, err := snapshotLine(p.snap)
		if err != nil {
			return nil, err
		}
		s += line + "\n"
	}
	return []byte(s), nil
}

func decodeStorePointer(b []byte) (storePointer, error) {
	var p storePointer
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	bad := func(why string) (storePointer, error) {
		return storePointer{}, fmt.Errorf("cluster: %s is damaged (%s)", storePointerFile, why)
	}
	if len(lines) < 2 || lines[0] != "tabula-store 1" {
		return bad("no header")
	}
	if _, err := fmt.Sscanf(lines[1], "dir %d", &p.n); err != nil || p.n < 1 {
		return bad("no store directory")
	}
	if len(lines) == 3 {
		snap, err := parseSnapshotLine(lines[2])
		if err != nil {
			return bad(err.Error())
		}
		p.snap = snap
	} else if len(lines) > 3 {
		return bad("trailing lines")
	}
	return p, nil
}

// snapshotLine records a snapshot's position and configuration in a
// small file: "snapshot INDEX TERM CONFSTATE-HEX".
func snapshotLine(meta *raftpb.SnapshotMetadata) (string, error) {
	cs, err := proto.Marshal(meta.GetConfState())
	if err != nil {
		return "", err
	}
	// An empty configuration marshals to nothing: the line then ends
	// after the term.
	return strings.TrimSuffix(fmt.Sprintf("snapshot %d %d %s", meta.GetIndex(), meta.GetTerm(), hex.EncodeToString(cs)), " "), nil
}

func parseSnapshotLine(line string) (*raftpb.SnapshotMetadata, error) {
	f := strings.Fields(line)
	if len(f) < 3 || len(f) > 4 || f[0] != "snapshot" {
		return nil, errors.New("bad snapshot line")
	}
	idx, err1 := strconv.ParseUint(f[1], 10, 64)
	term, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, errors.New("bad snapshot line")
	}
	csHex := ""
	if len(f) == 4 {
		csHex = f[3]
	}
	raw, err := hex.DecodeString(csHex)
	cs := &raftpb.ConfState{}
	if err != nil || proto.Unmarshal(raw, cs) != nil {
		return nil, errors.New("bad conf state")
	}
	return &raftpb.SnapshotMetadata{Index: &idx, Term: &term, ConfState: cs}, nil
}

// storeDir is a node's data directory as far as its store goes.
type storeDir struct {
	dir  string
	fs   vfs.FS
	opts partition.Options
}

func newStoreDir(dataDir string, opts *partition.Options) *storeDir {
	o := partition.Options{}
	if opts != nil {
		o = *opts
	}
	fs := o.LSM.FS
	if fs == nil {
		fs = vfs.Default()
	}
	return &storeDir{dir: dataDir, fs: fs, opts: o}
}

// readPointer reads STORE; a data directory without one gets store-1.
func (d *storeDir) readPointer() (storePointer, error) {
	b, err := vfs.ReadFile(d.fs, filepath.Join(d.dir, storePointerFile), 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return storePointer{n: 1}, nil
	}
	if err != nil {
		return storePointer{}, fmt.Errorf("cluster: %w", err)
	}
	return decodeStorePointer(b)
}

// writePointer replaces STORE atomically and durably.
func (d *storeDir) writePointer(p storePointer) error {
	b, err := p.encode()
	if err != nil {
		return err
	}
	return d.writeFile(storePointerFile, b)
}

// OpenStore opens the node's replica of the store in dataDir (creating
// one the first time), as a node's Config.Store wants it, and removes the
// leftovers of a snapshot install that a crash cut short. opts are the
// store's options (their LSM.FS the filesystem of dataDir).
func OpenStore(dataDir string, opts *partition.Options) (*partition.Store, error) {
	d := newStoreDir(dataDir, opts)
	if err := d.fs.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	p, err := d.readPointer()
	if err != nil {
		return nil, err
	}
	// The store before the live one, and one staged after it but never
	// switched to, are leftovers of an install.
	for _, n := range []int{p.n - 1, p.n + 1} {
		if n >= 1 {
			if err := partition.RemoveStore(d.fs, storePointer{n: n}.dir(dataDir)); err != nil {
				return nil, err
			}
		}
	}
	return partition.Open(p.dir(dataDir), &d.opts)
}
