// Package partition is Tabula's table service: accounts, their tables and
// the tables' entities, stored in one lsm.DB under the clustered index
// (account, table, PartitionKey, RowKey), with the semantics of Azure Table
// storage: case-insensitive table names, server commit timestamps and
// ETags, insert / update / merge / upsert / delete with If-Match
// conditions, atomic entity group transactions, $filter queries paged by
// continuation tokens, stored access policies and service properties. It
// knows nothing of HTTP: the server layer maps its errors, which carry the
// service's error codes (ErrorCode, HTTPStatus), to responses.
//
// Storage (docs/keys.md): each entity is one key-value pair, the key the
// escaped tuple (account, table id, PartitionKey, RowKey), so that key
// order is the service's order; the value odata's stored encoding. A table
// id is never reused: dropping a table is one catalog edit, after which
// the engine's DropKey discards the table's keys in flushes and
// compactions and a background compaction reclaims the space.
//
// Writes to one partition are serialized by a latch; the check of a
// condition and the ordering of the commit happen under it, the wait for
// the commit's fsync after it, so that the writers of one busy partition
// share fsyncs (the engine's group commit) like writers of different
// partitions do. A write checks its condition against the previous write
// of the partition even while that is still being synced, and commits only
// if it does. Every write is synced and gets a timestamp from a
// store-wide clock that never repeats. A batch is one engine batch:
// queries, which read each page at one snapshot, see all of it or nothing,
// and only once it is durable.
//
// Each table's key space is divided into range partitions, contiguous
// PartitionKey ranges with live statistics (entities, bytes, reads and
// writes per second). A maintenance goroutine splits a range that grows
// past Options.SplitBytes or gets busier than Options.SplitOpsPerSecond, at
// a PartitionKey boundary near its byte midpoint, and merges cold
// neighbours smaller together than Options.MergeBytes. Splits and merges
// only edit metadata; scans cross range boundaries transparently.
//
// For replication (package cluster), a write may carry a Stamp: it then
// commits at the proposer's timestamps, unsynced, recording the log index
// of its raft group in the same engine batch (AppliedIndex, SyncApplied;
// each group has its own). A replica is caught up from a snapshot: of the
// whole store (Snapshot, RestoreSnapshot), or of one table's PartitionKey
// span with its group's applied index (SnapshotSpan, IngestSpan), the
// unit a range partition's group needs (docs/snapshot.md).
//
// A complete program:
//
//	package main
//
//	import (
//		"context"
//		"fmt"
//		"log"
//		"os"
//
//		"github.com/tabuladb/tabula/odata"
//		"github.com/tabuladb/tabula/partition"
//	)
//
//	func main() {
//		dir, err := os.MkdirTemp("", "tabula")
//		if err != nil {
//			log.Fatal(err)
//		}
//		defer os.RemoveAll(dir)
//		store, err := partition.Open(dir, nil) // nil: default options
//		if err != nil {
//			log.Fatal(err)
//		}
//		defer store.Close()
//		ctx := context.Background()
//		const account = "devstoreaccount1"
//
//		if _, err := store.CreateTable(ctx, account, "Planets"); err != nil {
//			log.Fatal(err)
//		}
//		for i, name := range []string{"Mercury", "Venus", "Earth"} {
//			_, err := store.InsertEntity(ctx, account, "planets", &odata.Entity{
//				PartitionKey: "inner", RowKey: name,
//				Properties: []odata.Property{{Name: "Order", Value: odata.Int32Value(int32(i + 1))}},
//			})
//			if err != nil {
//				log.Fatal(err)
//			}
//		}
//
//		// A filtered query, one page of at most 1,000 entities.
//		page, next, err := store.QueryEntitiesPage(ctx, account, "planets",
//			partition.EntityQuery{Filter: "PartitionKey eq 'inner' and Order ge 2"})
//		if err != nil {
//			log.Fatal(err)
//		}
//		for _, e := range page {
//			fmt.Println(e.RowKey)
//		}
//		fmt.Println("more:", !next.IsZero())
//
//		// An entity group transaction: all of it or nothing.
//		_, err = store.ExecuteBatch(ctx, account, "planets", []partition.Op{
//			{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "inner", RowKey: "Mars"}},
//			{Kind: partition.OpDelete, Entity: &odata.Entity{PartitionKey: "inner", RowKey: "Venus"}, IfMatch: "*"},
//		})
//		if err != nil {
//			log.Fatal(err)
//		}
//		_, err = store.GetEntity(ctx, account, "planets", "inner", "Venus")
//		fmt.Println(partition.ErrorCode(err))
//	}
//
// It prints Earth and Venus (RowKey order), "more: false" and
// ResourceNotFound. The same program is ExampleStore, run by go test.
package partition
