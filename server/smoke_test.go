package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestSDKSmoke(t *testing.T) {
	ts := startServer(t, nil)
	svc, err := aztables.NewServiceClientFromConnectionString(devConnectionString(ts.Endpoint), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, "smoke", nil); err != nil {
		t.Fatal(err)
	}
	c := svc.NewClient("smoke")
	e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": "r", "N": 5})
	if _, err := c.AddEntity(ctx, e, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetEntity(ctx, "p", "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", got.Value)
	pager := c.NewListEntitiesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d entities", len(page.Entities))
	}
}
