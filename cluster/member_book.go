package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tabuladb/tabula/vfs"
)

// membersFile holds a node's member book: an "id address" line per
// member, then "highest", "removed" and "draining" lines
// (docs/cluster-files.md).
const membersFile = "MEMBERS"

// memberBook is the group's membership as a replica records it: every
// member's internal address, the highest id ever assigned, the ids
// removed, and the members being drained of their range groups before
// they leave (placement.go).
type memberBook struct {
	addrs    map[uint64]string
	highest  uint64
	removed  map[uint64]bool
	draining map[uint64]bool
}

func newMemberBook() memberBook {
	return memberBook{addrs: map[uint64]string{}, removed: map[uint64]bool{}, draining: map[uint64]bool{}}
}

// encodeMembers is the member book as MEMBERS and snapshots hold it.
func encodeMembers(b memberBook) []byte {
	var out bytes.Buffer
	for _, id := range slices.Sorted(maps.Keys(b.addrs)) {
		fmt.Fprintf(&out, "%d %s\n", id, b.addrs[id])
	}
	if b.highest > 0 {
		fmt.Fprintf(&out, "highest %d\n", b.highest)
	}
	for _, id := range slices.Sorted(maps.Keys(b.removed)) {
		fmt.Fprintf(&out, "removed %d\n", id)
	}
	for _, id := range slices.Sorted(maps.Keys(b.draining)) {
		fmt.Fprintf(&out, "draining %d\n", id)
	}
	return out.Bytes()
}

// checkAddress says whether addr can be a member's internal address in
// MEMBERS, which holds it after the member's id and a space, one a line:
// it must be printable ASCII without spaces, or it would not read back as
// written (a carriage return, a line break) and the node could not
// restart. What the address means is the transport's business.
func checkAddress(addr string) error {
	if addr == "" {
		return errors.New("cluster: an empty address")
	}
	for i := 0; i < len(addr); i++ {
		if c := addr[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("cluster: address %q holds byte %#x: want printable ASCII without spaces", addr, c)
		}
	}
	return nil
}

// decodeMembers reads a member book. A book written before ids were
// tracked has address lines only: its highest is its highest id.
func decodeMembers(raw []byte) (memberBook, error) {
	b := newMemberBook()
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), " ")
		if key == "highest" || key == "removed" || key == "draining" {
			id, err := strconv.ParseUint(val, 10, 64)
			if err != nil || id == 0 || strconv.FormatUint(id, 10) != val {
				return memberBook{}, fmt.Errorf("cluster: a bad member line %q", sc.Text())
			}
			switch key {
			case "removed":
				b.removed[id] = true
			case "draining":
				b.draining[id] = true
			}
			b.highest = max(b.highest, id)
			continue
		}
		id, err := strconv.ParseUint(key, 10, 64)
		if !ok || err != nil || id == 0 || checkAddress(val) != nil {
			return memberBook{}, fmt.Errorf("cluster: a bad member line %q", sc.Text())
		}
		b.addrs[id] = val
		b.highest = max(b.highest, id)
	}
	return b, sc.Err()
}

// loadMembers reads a node's member book; a missing file is an empty one.
func loadMembers(fs vfs.FS, dir string) (memberBook, error) {
	b, err := vfs.ReadFile(fs, filepath.Join(dir, membersFile), 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return newMemberBook(), nil
	}
	if err != nil {
		return memberBook{}, err
	}
	return decodeMembers(b)
}
