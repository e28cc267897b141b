// Command tabula is Tabula's binary: for now, a tool that inspects a
// store's directory.
//
//	tabula inspect DIR   print the levels, tables and WAL segments of the store in DIR
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "inspect":
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: tabula inspect DIR")
			return 2
		}
		if err := inspect(args[1], stdout); err != nil {
			fmt.Fprintln(stderr, "tabula:", err)
			return 1
		}
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "tabula: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage: tabula <command> [arguments]

commands:
  inspect DIR   print the levels, tables and WAL segments of the store in DIR`)
}
