package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// ioCounters are the fields of /proc/self/io. The kernel counts them per
// process (all threads), which is why every run gets its own child: the
// figures then belong to one engine alone.
type ioCounters struct {
	RChar               int64 `json:"rchar"`       // bytes passed to read-like syscalls
	WChar               int64 `json:"wchar"`       // bytes passed to write-like syscalls
	ReadBytes           int64 `json:"read_bytes"`  // bytes fetched from the block layer
	WriteBytes          int64 `json:"write_bytes"` // bytes sent (dirtied) toward the block layer
	CancelledWriteBytes int64 `json:"cancelled_write_bytes"`
}

func (c ioCounters) sub(d ioCounters) ioCounters {
	return ioCounters{
		RChar:               c.RChar - d.RChar,
		WChar:               c.WChar - d.WChar,
		ReadBytes:           c.ReadBytes - d.ReadBytes,
		WriteBytes:          c.WriteBytes - d.WriteBytes,
		CancelledWriteBytes: c.CancelledWriteBytes - d.CancelledWriteBytes,
	}
}

// readProcIO reads /proc/self/io.
func readProcIO() (ioCounters, error) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return ioCounters{}, err
	}
	var c ioCounters
	fields := map[string]*int64{
		"rchar":                 &c.RChar,
		"wchar":                 &c.WChar,
		"read_bytes":            &c.ReadBytes,
		"write_bytes":           &c.WriteBytes,
		"cancelled_write_bytes": &c.CancelledWriteBytes,
	}
	if err := parseProcFields(data, fields); err != nil {
		return ioCounters{}, fmt.Errorf("/proc/self/io: %w", err)
	}
	return c, nil
}

// parseProcFields parses "name: value [kB]" lines into fields, requiring
// every one of them.
func parseProcFields(data []byte, fields map[string]*int64) error {
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		p, want := fields[name]
		if !ok || !want {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		if strings.HasSuffix(rest, "kB") {
			v <<= 10
		}
		*p = v
		seen++
	}
	if seen != len(fields) {
		return fmt.Errorf("found %d of %d fields", seen, len(fields))
	}
	return nil
}

// memStatus returns VmHWM (peak resident set) and VmRSS in bytes.
func memStatus() (hwm, rss int64, err error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	err = parseProcFields(data, map[string]*int64{"VmHWM": &hwm, "VmRSS": &rss})
	return hwm, rss, err
}

// resetPeakRSS sets VmHWM back to the current RSS (Linux >= 4.0), so that a
// read workload's peak is not its untimed fill's.
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// dirUsage is what du says of a data directory.
type dirUsage struct {
	Allocated int64 // bytes allocated to its files (st_blocks)
	Apparent  int64 // sum of file sizes
	Tables    int64 // bytes allocated to sstables (*.sst, goleveldb's *.ldb)
}

// diskUsage is du for dir. Tables are counted apart because WAL files
// differ most between engines for reasons of policy, not layout: Pebble
// preallocates them and keeps obsolete ones for recycling.
func diskUsage(dir string) (dirUsage, error) {
	var u dirUsage
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			// The engine, still open, deleted it since the directory was
			// read (an obsolete WAL segment or table): it takes no space.
			return nil
		}
		if err != nil {
			return err
		}
		var alloc int64
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			alloc = st.Blocks * 512
		}
		u.Allocated += alloc
		if d.Type().IsRegular() {
			u.Apparent += info.Size()
			if ext := filepath.Ext(path); ext == ".sst" || ext == ".ldb" {
				u.Tables += alloc
			}
		}
		return nil
	})
	return u, err
}

// fsType names the filesystem holding dir, from its statfs magic.
func fsType(dir string) (string, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", err
	}
	names := map[int64]string{
		0xEF53:     "ext4",
		0x58465342: "xfs",
		0x9123683E: "btrfs",
		0x01021994: "tmpfs",
		0x794C7630: "overlayfs",
		0x2FC12FC1: "zfs",
		0x6969:     "nfs",
		0x858458F6: "ramfs",
		0x65735546: "fuse",
	}
	if n, ok := names[int64(st.Type)]; ok {
		return n, nil
	}
	return fmt.Sprintf("0x%x", st.Type), nil
}

// machine describes the host for the report.
type machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	MemTotal  int64  `json:"mem_total"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	DataFS    string `json:"data_fs"` // filesystem of the data directories
}

// describe is the machine in one line, for reports.
func (m machine) describe() string {
	return fmt.Sprintf("%s, %d cores, %.0f GiB RAM, Linux %s, data on %s, %s",
		m.CPU, m.Cores, float64(m.MemTotal)/(1<<30), m.Kernel, m.DataFS, m.GoVersion)
}

func describeMachine(dataDir string) machine {
	m := machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				m.CPU = strings.TrimSpace(val)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		_ = parseProcFields(data, map[string]*int64{"MemTotal": &m.MemTotal})
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if t, err := fsType(dataDir); err == nil {
		m.DataFS = t
	}
	return m
}
