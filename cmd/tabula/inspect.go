package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/tabuladb/tabula/lsm"
)

// inspect prints what the store in dir holds, without opening it for writing.
func inspect(dir string, w io.Writer) error {
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(w, "%s: no store yet (nothing has been written there)\n", dir)
		return nil
	}
	d, err := lsm.Describe(dir, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "manifest:   %s\n", d.Manifest)
	fmt.Fprintf(w, "last seq:   %d\n", d.LastSeq)
	fmt.Fprintf(w, "next file:  %d\n", d.NextFileNum)
	fmt.Fprintf(w, "wal:        %d segment(s) %v, replay from %06d\n", len(d.WALs), d.WALs, d.LogNum)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nlevel\ttable\tbytes\tseqnums\tsmallest\tlargest")
	for level, tables := range d.Levels {
		var total uint64
		for _, t := range tables {
			total += t.Size
			fmt.Fprintf(tw, "L%d\t%06d.sst\t%d\t%d-%d\t%q\t%q\n", level, t.FileNum, t.Size, t.SmallestSeq, t.LargestSeq, t.Smallest, t.Largest)
		}
		if len(tables) > 0 {
			fmt.Fprintf(tw, "L%d\t%d tables\t%d\t\t\t\n", level, len(tables), total)
		}
	}
	return tw.Flush()
}
