// Command tabula is Tabula's binary: the Table service server and a tool
// that inspects a store's directory.
//
//	tabula serve [flags]   serve the Azure Table API (default 127.0.0.1:10002, data in ./tabula-data)
//	tabula inspect DIR     print the levels, tables and WAL segments of the store in DIR
//	tabula inspect --hot ADDR  the hottest partitions and accounts of a server run with --emulate-limits
//	tabula cluster status  list a cluster's nodes, leader, terms and replication
//	tabula backup [--data DIR] OUT   copy the store into OUT, online while a server runs
//	tabula restore BACKUP DIR        check a backup and restore it into a new DIR
//	tabula verify [--data DIR]       check every checksum, record and key order
//	tabula export [--data DIR] [--table T ...] OUT.jsonl   tables and entities to JSON lines
//	tabula import --data DIR IN.jsonl                     JSON lines into the store, resumable
//	tabula import-azurite PATH [--data DIR]               the Azurite emulator's table database
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
	case "backup":
		return backupCommand(args[1:], stdout, stderr)
	case "restore":
		return restoreCommand(args[1:], stdout, stderr)
	case "verify":
		return verifyCommand(args[1:], stdout, stderr)
	case "export":
		return exportCommand(args[1:], stdout, stderr)
	case "import":
		return importCommand(args[1:], stdout, stderr)
	case "import-azurite":
		return importAzuriteCommand(args[1:], stdout, stderr)
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
  cluster status --node ADDR
                  the nodes of a cluster, their raft state and replication
  cluster decommission --node ADDR --id N
                  remove node N from the cluster
  backup [--data DIR] OUT
                  copy the store into the new directory OUT, online while a server runs
  restore BACKUP DIR
                  check a backup and restore it into DIR (which must not exist or be empty)
  verify [--data DIR]
                  check every checksum, record and key order of a stopped store or a backup
  export [--data DIR] [--table T ...] OUT.jsonl
                  write tables and entities to JSON lines, every Edm type exact
  import --data DIR IN.jsonl
                  load an export file in batches per partition; resumes after an interruption
  import-azurite PATH [--data DIR]
                  load the Azurite emulator's table database (__azurite_db_table__.json)`)
}
