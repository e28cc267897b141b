package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// These tests drive the server with the official Go SDK, aztables,
// exactly as an application would.

// sdkOptions turns off the SDK's retries, so a failure shows at once.
var sdkOptions = &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}

func newServiceClient(t testing.TB, ts *testServer) *aztables.ServiceClient {
	t.Helper()
	svc, err := aztables.NewServiceClientFromConnectionString(devConnectionString(ts.Endpoint), sdkOptions)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// newTable starts a server and creates a table on it, with clients that
// use the emulator's plain path-style URLs and Shared Key.
func newTable(t testing.TB, name string) (*testServer, *aztables.ServiceClient, *aztables.Client) {
	t.Helper()
	return newTableFor(t, sdkWays[0], name)
}

// newTableFor is newTable with clients that reach the server w's way.
func newTableFor(t testing.TB, w sdkWay, name string) (*testServer, *aztables.ServiceClient, *aztables.Client) {
	t.Helper()
	ts := startServerFor(t, w, nil)
	svc := ts.serviceClient(t, w)
	if _, err := svc.CreateTable(context.Background(), name, nil); err != nil {
		t.Fatal(err)
	}
	return ts, svc, svc.NewClient(name)
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func props(pk, rk string, kv ...any) map[string]any {
	m := map[string]any{"PartitionKey": pk, "RowKey": rk}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// wantSDKError checks that err is the service's answer with status and
// error code.
func wantSDKError(t testing.TB, what string, err error, status int, code string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("%s: got %v, want a %d %s response", what, err, status, code)
	}
	if re.StatusCode != status || re.ErrorCode != code {
		t.Fatalf("%s: got %d %s, want %d %s", what, re.StatusCode, re.ErrorCode, status, code)
	}
}

func getProps(t testing.TB, c *aztables.Client, pk, rk string) (map[string]any, azcore.ETag) {
	t.Helper()
	resp, err := c.GetEntity(context.Background(), pk, rk, nil)
	if err != nil {
		t.Fatalf("get %s/%s: %v", pk, rk, err)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Value, &m); err != nil {
		t.Fatal(err)
	}
	return m, resp.ETag
}

func TestSDKEntityLifecycle(t *testing.T) { eachWay(t, testSDKEntityLifecycle) }

func testSDKEntityLifecycle(t *testing.T, w sdkWay) {
	ctx := context.Background()
	_, _, c := newTableFor(t, w, "life")

	added, err := c.AddEntity(ctx, marshal(t, props("p", "r", "A", "one", "N", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AddEntity(ctx, marshal(t, props("p", "r")), nil)
	wantSDKError(t, "insert of an existing entity", err, http.StatusConflict, "EntityAlreadyExists")

	m, etag := getProps(t, c, "p", "r")
	if etag != added.ETag || m["A"] != "one" || m["N"] != float64(1) {
		t.Fatalf("get after insert: %v %s (insert ETag %s)", m, etag, added.ETag)
	}

	// Replace with the current ETag: B replaces A.
	up, err := c.UpdateEntity(ctx, marshal(t, props("p", "r", "B", "two")), &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeReplace})
	if err != nil {
		t.Fatal(err)
	}
	if up.ETag == etag {
		t.Fatal("a replace kept the ETag")
	}
	_, err = c.UpdateEntity(ctx, marshal(t, props("p", "r", "C", 3)), &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeMerge})
	wantSDKError(t, "merge with a stale ETag", err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
	if _, err := c.UpdateEntity(ctx, marshal(t, props("p", "r", "C", 3)), &aztables.UpdateEntityOptions{IfMatch: to.Ptr(azcore.ETagAny), UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	if m, _ := getProps(t, c, "p", "r"); m["A"] != nil || m["B"] != "two" || m["C"] != float64(3) {
		t.Fatalf("after replace and merge: %v", m)
	}
	_, err = c.UpdateEntity(ctx, marshal(t, props("p", "missing")), &aztables.UpdateEntityOptions{IfMatch: to.Ptr(azcore.ETagAny), UpdateMode: aztables.UpdateModeMerge})
	wantSDKError(t, "merge of a missing entity", err, http.StatusNotFound, "ResourceNotFound")

	// Upserts, on an existing and on a missing entity.
	if _, err := c.UpsertEntity(ctx, marshal(t, props("p", "r", "D", true)), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	if m, _ := getProps(t, c, "p", "r"); m["B"] != "two" || m["D"] != true {
		t.Fatalf("after insert-or-merge: %v", m)
	}
	if _, err := c.UpsertEntity(ctx, marshal(t, props("p", "r", "E", "e")), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		t.Fatal(err)
	}
	if m, _ := getProps(t, c, "p", "r"); m["B"] != nil || m["E"] != "e" {
		t.Fatalf("after insert-or-replace: %v", m)
	}
	for _, mode := range []aztables.UpdateMode{aztables.UpdateModeMerge, aztables.UpdateModeReplace} {
		rk := "upsert-" + string(mode)
		if _, err := c.UpsertEntity(ctx, marshal(t, props("p", rk, "F", 1)), &aztables.UpsertEntityOptions{UpdateMode: mode}); err != nil {
			t.Fatal(err)
		}
		if m, _ := getProps(t, c, "p", rk); m["F"] != float64(1) {
			t.Fatalf("upsert %s of a missing entity: %v", mode, m)
		}
	}

	// Deletes: stale ETag, then the right one, then a missing entity.
	_, err = c.DeleteEntity(ctx, "p", "r", &aztables.DeleteEntityOptions{IfMatch: &etag})
	wantSDKError(t, "delete with a stale ETag", err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
	_, cur := getProps(t, c, "p", "r")
	if _, err := c.DeleteEntity(ctx, "p", "r", &aztables.DeleteEntityOptions{IfMatch: &cur}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetEntity(ctx, "p", "r", nil)
	wantSDKError(t, "get of a deleted entity", err, http.StatusNotFound, "ResourceNotFound")
	_, err = c.DeleteEntity(ctx, "p", "r", nil)
	wantSDKError(t, "delete of a missing entity", err, http.StatusNotFound, "ResourceNotFound")
	if _, err := c.DeleteEntity(ctx, "p", "upsert-merge", nil); err != nil {
		t.Fatal(err)
	}

	// A missing table: its entity set is TableNotFound, an entity named by
	// its keys ResourceNotFound.
	_, err = c.AddEntity(ctx, marshal(t, props("p", "r")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.AddEntity(ctx, marshal(t, props("p", "r")), nil)
	wantSDKError(t, "insert into a deleted table", err, http.StatusNotFound, "TableNotFound")
	_, err = c.GetEntity(ctx, "p", "r", nil)
	wantSDKError(t, "get from a deleted table", err, http.StatusNotFound, "ResourceNotFound")
	_, err = c.UpsertEntity(ctx, marshal(t, props("p", "r")), nil)
	wantSDKError(t, "upsert into a deleted table", err, http.StatusNotFound, "ResourceNotFound")
}

// TestSDKEdmTypes round-trips every Edm type, with edge values, and
// filters on each.
func TestSDKEdmTypes(t *testing.T) { eachWay(t, testSDKEdmTypes) }

func testSDKEdmTypes(t *testing.T, w sdkWay) {
	ctx := context.Background()
	_, _, c := newTableFor(t, w, "types")
	minDate := time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDate := time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC)
	precise := time.Date(2024, 2, 29, 12, 34, 56, 123456700, time.UTC)
	rows := []map[string]any{
		{"S": "", "I32": int32(math.MinInt32), "I64": aztables.EDMInt64(math.MinInt64), "D": 0.5, "B": false,
			"T": aztables.EDMDateTime(minDate), "G": aztables.EDMGUID("00000000-0000-0000-0000-000000000000"), "X": aztables.EDMBinary{}},
		{"S": "héllo ✓ 'quote' \"dq\" \\ \u0001", "I32": int32(math.MaxInt32), "I64": aztables.EDMInt64(math.MaxInt64), "D": 2.0, "B": true,
			"T": aztables.EDMDateTime(maxDate), "G": aztables.EDMGUID("c9da6455-213d-42c9-9a79-3e9149a57833"), "X": aztables.EDMBinary{0, 1, 0xfe, 0xff}},
		{"S": "x", "I32": int32(0), "I64": aztables.EDMInt64(5), "D": -1e300, "B": true,
			"T": aztables.EDMDateTime(precise), "G": aztables.EDMGUID("ffffffff-ffff-ffff-ffff-ffffffffffff"), "X": aztables.EDMBinary{0x0a, 0x0b}},
	}
	for i, p := range rows {
		e := aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: "p", RowKey: fmt.Sprint(i)}, Properties: p}
		if _, err := c.AddEntity(ctx, marshal(t, e), nil); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	for i, p := range rows {
		resp, err := c.GetEntity(ctx, "p", fmt.Sprint(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got aztables.EDMEntity
		if err := json.Unmarshal(resp.Value, &got); err != nil {
			t.Fatal(err)
		}
		for k, want := range p {
			g := got.Properties[k]
			switch w := want.(type) {
			case aztables.EDMDateTime:
				want, g = time.Time(w).UTC(), time.Time(g.(aztables.EDMDateTime)).UTC()
			case aztables.EDMBinary:
				want, g = []byte(w), []byte(g.(aztables.EDMBinary))
			}
			if fmt.Sprint(g) != fmt.Sprint(want) {
				t.Errorf("row %d %s: got %#v (%T), want %#v", i, k, g, g, want)
			}
		}
	}
	for _, c2 := range []struct {
		filter string
		want   []string
	}{
		{"I64 gt 4L", []string{"1", "2"}},
		{"I64 lt 0L", []string{"0"}},
		{"I64 eq 5", nil}, // an Int32 literal never equals an Int64 property
		{"I32 ge 0", []string{"1", "2"}},
		{"D lt 0.0", []string{"2"}},
		{"D eq 2.0", []string{"1"}},
		{"B eq true", []string{"1", "2"}},
		{"not B", []string{"0"}},
		{"T lt datetime'1700-01-01T00:00:00Z'", []string{"0"}},
		{"T eq datetime'2024-02-29T12:34:56.1234567Z'", []string{"2"}},
		{"T gt datetime'2024-02-29T12:34:56.1234566Z' and T lt datetime'9999-01-01T00:00:00Z'", []string{"2"}},
		{"G eq guid'c9da6455-213d-42c9-9a79-3e9149a57833'", []string{"1"}},
		{"X eq X'0a0b'", []string{"2"}},
		{"X eq binary'00'", nil},
		{"S eq ''", []string{"0"}},
		{"S ge 'h'", []string{"1", "2"}},
		{"Missing eq 1 or Missing ne 1", nil},
	} {
		pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr(c2.filter)})
		var got []string
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("%s: %v", c2.filter, err)
			}
			for _, raw := range page.Entities {
				var e aztables.Entity
				json.Unmarshal(raw, &e)
				got = append(got, e.RowKey)
			}
		}
		if !slices.Equal(got, c2.want) {
			t.Errorf("filter %s: got %v, want %v", c2.filter, got, c2.want)
		}
	}
	_, err := c.AddEntity(ctx, marshal(t, props("p", "bad", "X@odata.type", "Edm.Int64", "X", "twelve")), nil)
	wantSDKError(t, "an Int64 that is not a number", err, http.StatusBadRequest, "InvalidInput")
	_, err = c.AddEntity(ctx, marshal(t, props("p", "a/b")), nil)
	wantSDKError(t, "a RowKey with '/'", err, http.StatusBadRequest, "OutOfRangeInput")
}

// TestSDKPagination walks thousands of entities page by page, with and
// without $top, a filter and $select.
func TestSDKPagination(t *testing.T) { eachWay(t, testSDKPagination) }

func testSDKPagination(t *testing.T, w sdkWay) {
	ctx := context.Background()
	_, _, c := newTableFor(t, w, "pages")
	var want []string
	for p := range 3 {
		n := []int{2500, 10, 700}[p]
		for start := 0; start < n; start += 100 {
			var actions []aztables.TransactionAction
			for i := start; i < min(n, start+100); i++ {
				rk := fmt.Sprintf("r%05d", i)
				want = append(want, fmt.Sprintf("p%d/%s", p, rk))
				actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
					Entity: marshal(t, props(fmt.Sprint("p", p), rk, "N", i, "Pad", "some text to carry"))})
			}
			if _, err := c.SubmitTransaction(ctx, actions, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	walk := func(opts *aztables.ListEntitiesOptions) (keys []string, pages int, sample map[string]any) {
		pager := c.NewListEntitiesPager(opts)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if opts != nil && opts.Top != nil && len(page.Entities) > int(*opts.Top) {
				t.Fatalf("page of %d over $top %d", len(page.Entities), *opts.Top)
			}
			for _, raw := range page.Entities {
				var m map[string]any
				json.Unmarshal(raw, &m)
				keys = append(keys, fmt.Sprint(m["PartitionKey"], "/", m["RowKey"]))
				sample = m
			}
		}
		return keys, pages, sample
	}
	keys, pages, _ := walk(nil)
	if !slices.Equal(keys, want) || pages < 4 {
		t.Fatalf("full walk: %d keys in %d pages, want %d keys in at least 4 pages", len(keys), pages, len(want))
	}
	keys, pages, _ = walk(&aztables.ListEntitiesOptions{Top: to.Ptr(int32(333))})
	if !slices.Equal(keys, want) || pages < 10 {
		t.Fatalf("walk with $top=333: %d keys in %d pages", len(keys), pages)
	}
	keys, _, sample := walk(&aztables.ListEntitiesOptions{Filter: to.Ptr("N ge 600 and N lt 705"), Select: to.Ptr("N"), Top: to.Ptr(int32(50))})
	if len(keys) != 105+100 { // p0 has N 600..704, p2 600..699, p1 none
		t.Fatalf("filtered walk: %d keys", len(keys))
	}
	if _, ok := sample["Pad"]; ok {
		t.Fatalf("$select=N returned Pad: %v", sample)
	}
}

func TestSDKTransactions(t *testing.T) { eachWay(t, testSDKTransactions) }

func testSDKTransactions(t *testing.T, w sdkWay) {
	ctx := context.Background()
	_, _, c := newTableFor(t, w, "txns")
	for i := range 3 {
		if _, err := c.AddEntity(ctx, marshal(t, props("p", fmt.Sprint("r", i), "N", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, etag := getProps(t, c, "p", "r1")
	resp, err := c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, props("p", "new", "N", 10))},
		{ActionType: aztables.TransactionTypeUpdateMerge, Entity: marshal(t, props("p", "r0", "M", 1))},
		{ActionType: aztables.TransactionTypeUpdateReplace, Entity: marshal(t, props("p", "r1", "M", 2)), IfMatch: &etag},
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: marshal(t, props("p", "up", "M", 3))},
		{ActionType: aztables.TransactionTypeInsertReplace, Entity: marshal(t, props("p", "up2", "M", 4))},
		{ActionType: aztables.TransactionTypeDelete, Entity: marshal(t, props("p", "r2"))},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp
	if m, _ := getProps(t, c, "p", "r0"); m["N"] != float64(0) || m["M"] != float64(1) {
		t.Fatalf("merged r0: %v", m)
	}
	if m, _ := getProps(t, c, "p", "r1"); m["N"] != nil || m["M"] != float64(2) {
		t.Fatalf("replaced r1: %v", m)
	}
	for _, rk := range []string{"new", "up", "up2"} {
		getProps(t, c, "p", rk)
	}
	_, err = c.GetEntity(ctx, "p", "r2", nil)
	wantSDKError(t, "entity deleted in a transaction", err, http.StatusNotFound, "ResourceNotFound")

	// A failing operation in the middle: nothing of the batch applies.
	_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, props("p", "never1"))},
		{ActionType: aztables.TransactionTypeUpdateMerge, Entity: marshal(t, props("p", "r0", "M", 99))},
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, props("p", "new"))},
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, props("p", "never2"))},
	}, nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != "EntityAlreadyExists" {
		t.Fatalf("failing transaction: %v", err)
	}
	for _, rk := range []string{"never1", "never2"} {
		_, err := c.GetEntity(ctx, "p", rk, nil)
		wantSDKError(t, "entity of a failed transaction", err, http.StatusNotFound, "ResourceNotFound")
	}
	if m, _ := getProps(t, c, "p", "r0"); m["M"] != float64(1) {
		t.Fatalf("a failed transaction changed r0: %v", m)
	}

	_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, props("p", "a"))},
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, props("q", "b"))},
	}, nil)
	if !errors.As(err, &re) || re.ErrorCode != "CommandsInBatchActOnDifferentPartitions" {
		t.Fatalf("transaction across partitions: %v", err)
	}
	_, err = c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: marshal(t, props("p", "dup"))},
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: marshal(t, props("p", "dup"))},
	}, nil)
	if !errors.As(err, &re) || re.ErrorCode != "InvalidDuplicateRow" {
		t.Fatalf("transaction naming an entity twice: %v", err)
	}
}
