package partition_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// ExampleStore is the program of the package documentation: open a store,
// create a table, insert, query with a filter, run a batch.
func ExampleStore() {
	dir, err := os.MkdirTemp("", "tabula")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := partition.Open(dir, nil) // nil: default options
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	const account = "devstoreaccount1"

	if _, err := store.CreateTable(ctx, account, "Planets"); err != nil {
		log.Fatal(err)
	}
	for i, name := range []string{"Mercury", "Venus", "Earth"} {
		_, err := store.InsertEntity(ctx, account, "planets", &odata.Entity{
			PartitionKey: "inner", RowKey: name,
			Properties: []odata.Property{{Name: "Order", Value: odata.Int32Value(int32(i + 1))}},
		})
		if err != nil {
			log.Fatal(err)
		}
	}

	// A filtered query, one page of at most 1,000 entities.
	page, next, err := store.QueryEntitiesPage(ctx, account, "planets",
		partition.EntityQuery{Filter: "PartitionKey eq 'inner' and Order ge 2"})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page {
		fmt.Println(e.RowKey)
	}
	fmt.Println("more:", !next.IsZero())

	// An entity group transaction: all of it or nothing.
	_, err = store.ExecuteBatch(ctx, account, "planets", []partition.Op{
		{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "inner", RowKey: "Mars"}},
		{Kind: partition.OpDelete, Entity: &odata.Entity{PartitionKey: "inner", RowKey: "Venus"}, IfMatch: "*"},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.GetEntity(ctx, account, "planets", "inner", "Venus")
	fmt.Println(partition.ErrorCode(err))
	// Output:
	// Earth
	// Venus
	// more: false
	// ResourceNotFound
}
