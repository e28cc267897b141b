package lsm

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// fileType is the kind of a file in a DB's directory.
type fileType int

const (
	fileTypeUnknown  fileType = iota
	fileTypeLog               // NNNNNN.log: a WAL segment
	fileTypeTable             // NNNNNN.sst: an sstable
	fileTypeManifest          // MANIFEST-NNNNNN
	fileTypeCurrent           // CURRENT: names the live manifest
	fileTypeLock              // LOCK
	fileTypeTemp              // NNNNNN.tmp: a file being written atomically
)

func makeFilename(dir string, ft fileType, num uint64) string {
	switch ft {
	case fileTypeLog:
		return filepath.Join(dir, fmt.Sprintf("%06d.log", num))
	case fileTypeTable:
		return filepath.Join(dir, fmt.Sprintf("%06d.sst", num))
	case fileTypeManifest:
		return filepath.Join(dir, fmt.Sprintf("MANIFEST-%06d", num))
	case fileTypeCurrent:
		return filepath.Join(dir, "CURRENT")
	case fileTypeLock:
		return filepath.Join(dir, "LOCK")
	case fileTypeTemp:
		return filepath.Join(dir, fmt.Sprintf("%06d.tmp", num))
	}
	panic("lsm: unknown file type")
}

// parseFilename returns the type and number of a file name (not a path).
func parseFilename(name string) (fileType, uint64) {
	switch name {
	case "CURRENT":
		return fileTypeCurrent, 0
	case "LOCK":
		return fileTypeLock, 0
	}
	if rest, ok := strings.CutPrefix(name, "MANIFEST-"); ok {
		if n, err := strconv.ParseUint(rest, 10, 64); err == nil {
			return fileTypeManifest, n
		}
		return fileTypeUnknown, 0
	}
	numStr, ext, ok := strings.Cut(name, ".")
	if !ok {
		return fileTypeUnknown, 0
	}
	n, err := strconv.ParseUint(numStr, 10, 64)
	if err != nil {
		return fileTypeUnknown, 0
	}
	switch ext {
	case "log":
		return fileTypeLog, n
	case "sst":
		return fileTypeTable, n
	case "tmp":
		return fileTypeTemp, n
	}
	return fileTypeUnknown, 0
}
