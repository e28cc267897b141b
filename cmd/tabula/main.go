// Command tabula is Tabula's binary: the Table service server and a tool
// that inspects a store's directory.
//
//	tabula serve [flags]   serve the Azure Table API (default 127.0.0.1:10002, data in ./tabula-data)
//	tabula inspect DIR     print the levels, tables and WAL segments of the store in DIR
//	tabula inspect --hot ADDR  the hottest partitions and accounts of a server run with --emulate-limits
//	tabula cluster status  list a cluster's nodes, leader, terms and replication
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
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "inspect":
		if len(args) >= 2 && (args[1] == "--hot" || args[1] == "-hot") {
			return inspectHot(args[2:], stdout, stderr)
		}
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: tabula inspect DIR | tabula inspect --hot ADDR")
			return 2
		}
		if err := inspect(args[1], stdout); err != nil {
			fmt.Fprintln(stderr, "tabula:", err)
			return 1
		}
		return 0
	case "cluster":
		return clusterCommand(args[1:], stdout, stderr)
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
  serve [flags]   serve the Azure Table API; "tabula serve -h" lists the flags
  inspect DIR     print the levels, tables and WAL segments of the store in DIR
  inspect --hot ADDR
                  the hottest partitions and accounts of a running server
                  started with --emulate-limits
  cluster status  the nodes of a cluster, their raft state and replication`)
}
