package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags is a subcommand's flag set: its errors go to stderr, and its
// usage is synopsis followed by the flags' defaults.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses args and wants n positional arguments after the flags.
// It reports false, the usage printed, when they do not parse or number
// otherwise: the command then exits 2.
func parseArgs(fs *flag.FlagSet, args []string, n int) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() != n {
		fs.Usage()
		return false
	}
	return true
}

// parseOneArg parses args whose one positional argument may come before
// the flags or after them, and returns it. It reports false, the usage
// printed, when the flags do not parse or the argument is missing or not
// alone: the command then exits 2.
func parseOneArg(fs *flag.FlagSet, args []string) (string, bool) {
	var arg string
	if len(args) > 0 && args[0] != "" && !strings.HasPrefix(args[0], "-") {
		arg, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if arg == "" && fs.NArg() == 1 {
		arg = fs.Arg(0)
	} else if arg == "" || fs.NArg() != 0 {
		fs.Usage()
		return "", false
	}
	return arg, true
}
