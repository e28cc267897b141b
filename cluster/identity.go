package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/tabuladb/tabula/vfs"
)

// IdentityFile records, in a node's data directory, the cluster and node
// the directory belongs to (docs/cluster-files.md).
const IdentityFile = "CLUSTER"

// Identity is what CLUSTER says of a data directory: the cluster and node
// it belongs to, and whether the cluster removed that node.
type Identity struct {
	Cluster string
	Node    uint64
	Removed bool
}

func (id Identity) encode() []byte {
	s := fmt.Sprintf("cluster %s\nnode %d\n", id.Cluster, id.Node)
	if id.Removed {
		s += "removed\n"
	}
	return []byte(s)
}

// parseIdentity reads CLUSTER's content; ok is false if it is damaged.
func parseIdentity(b []byte) (id Identity, ok bool) {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "cluster ") {
		return Identity{}, false
	}
	id.Cluster = strings.TrimPrefix(lines[0], "cluster ")
	if _, err := fmt.Sscanf(lines[1], "node %d", &id.Node); err != nil || id.Node == 0 {
		return Identity{}, false
	}
	id.Removed = len(lines) > 2 && lines[2] == "removed"
	return id, true
}

// maxIdentityFile bounds what ReadIdentity reads of CLUSTER, a few short
// lines when it is sound.
const maxIdentityFile = 64 << 10

// ReadIdentity reads dir's CLUSTER; ok is false when there is none.
func ReadIdentity(dir string) (id Identity, ok bool, err error) {
	path := filepath.Join(dir, IdentityFile)
	b, err := vfs.ReadFile(vfs.Default(), path, maxIdentityFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, err
	}
	id, ok = parseIdentity(b)
	if !ok {
		return Identity{}, false, fmt.Errorf("%s is damaged", path)
	}
	return id, true, nil
}

// WriteIdentity replaces dir's CLUSTER atomically and durably: a power
// loss must not leave a directory that a later start, under another
// --join list or secret, takes for a new one (or a removed node's
// directory without its mark).
func WriteIdentity(dir string, id Identity) error {
	path := filepath.Join(dir, IdentityFile)
	if err := vfs.WriteFileAtomic(vfs.Default(), path, id.encode()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
