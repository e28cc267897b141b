package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// sdkFaults is the fault load of the SDK workloads: 5% of every kind of
// request fails, 503 ServerBusy and 500 InternalError before the
// operation, and 500 OperationTimedOut after its commit (the write is
// applied, the client told it failed).
const sdkFaults = "seed=%d;503=0.02,500=0.01,timeout=0.02"

// modelEntity is what the client's acknowledged history says an entity
// holds: the nonce of the last write, a counter, and the ETag that write
// (or the read that settled it) returned, "" when the client never saw
// one (a batch's inserts).
type modelEntity struct {
	Nonce string `json:"nonce"`
	V     int    `json:"v"`
	ETag  string `json:"etag"`
}

// TestGoSDKUnderFaults runs a workload with the Go SDK and its default
// retry policy against a server failing 5% of requests. The workload is
// idempotent by design: a retried insert that meets EntityAlreadyExists,
// a conditional update that meets a changed ETag, a delete that meets
// ResourceNotFound, each checks the entity to see whether its own earlier
// attempt was applied. The final store must then be exactly the
// acknowledged history, every ETag included: a write applied twice would
// change the entity's ETag behind the client's back.
func TestGoSDKUnderFaults(t *testing.T) {
	ts := startServer(t, &server.Options{Faults: mustFaults(t, fmt.Sprintf(sdkFaults, 16))})
	svc, err := aztables.NewServiceClientFromConnectionString(devConnectionString(ts.Endpoint), nil) // the default retry policy
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, "faulty", nil); err != nil && !isCode(err, "TableAlreadyExists") {
		t.Fatal(err)
	}
	client := svc.NewClient("faulty")
	const workers = 8
	models := make([]map[string]*modelEntity, workers)
	var settled atomic.Int64 // ambiguous answers settled by reading
	var wg sync.WaitGroup
	for w := range workers {
		models[w] = map[string]*modelEntity{}
		wg.Go(func() {
			if err := sdkWorkload(ctx, client, fmt.Sprint("w", w), models[w], &settled); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d ambiguous answers settled by reading", settled.Load())
	if settled.Load() == 0 {
		t.Error("no write met an ambiguous answer: the workload did not test what it should")
	}
	for w := range workers {
		compareWithStore(t, ts, "faulty", fmt.Sprint("w", w), models[w])
	}
}

// TestJSSDKUnderFaults runs testdata/jssdk/faults.mjs, the Go SDK
// workload's smaller twin, with the JS SDK's default retry policy against
// a server failing 5% of requests, and compares the store with the
// history it acknowledged.
func TestJSSDKUnderFaults(t *testing.T) {
	node := requireJSSDK(t)
	ts := startServer(t, &server.Options{Faults: mustFaults(t, fmt.Sprintf(sdkFaults, 17))})
	if _, err := ts.Store.CreateTable(context.Background(), auth.DevAccountName, "jsfaulty"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "faults.mjs")
	cmd.Dir = filepath.Join("testdata", "jssdk")
	cmd.Env = append(os.Environ(), "TABULA_CONNECTION_STRING="+devConnectionString(ts.Endpoint), "TABULA_TABLE=jsfaulty")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node faults.mjs: %v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var result struct {
		Settled int
		Models  map[string]map[string]*modelEntity
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &result); err != nil || len(result.Models) != 4 {
		t.Fatalf("faults.mjs printed %s (%v)", out, err)
	}
	t.Logf("%d ambiguous answers settled by reading", result.Settled)
	for pk, model := range result.Models {
		compareWithStore(t, ts, "jsfaulty", pk, model)
	}
}

// isCode reports whether err is the service's answer with code.
func isCode(err error, code string) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.ErrorCode == code
}

func nonce() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// sdkWorkload runs one worker's writes in partition pk, recording in model
// what was acknowledged.
func sdkWorkload(ctx context.Context, c *aztables.Client, pk string, model map[string]*modelEntity, settled *atomic.Int64) error {
	body := func(rk, nonce string, v int) []byte {
		b, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "Nonce": nonce, "V": v})
		return b
	}
	// read returns the entity's nonce, counter and ETag, or found false.
	read := func(rk string) (m modelEntity, found bool, err error) {
		resp, err := c.GetEntity(ctx, pk, rk, nil)
		if isCode(err, "ResourceNotFound") {
			return m, false, nil
		}
		if err != nil {
			return m, false, fmt.Errorf("%s/%s: get: %w", pk, rk, err)
		}
		var e struct {
			Nonce string
			V     int
		}
		if err := json.Unmarshal(resp.Value, &e); err != nil {
			return m, false, err
		}
		return modelEntity{Nonce: e.Nonce, V: e.V, ETag: string(resp.ETag)}, true, nil
	}
	// settle checks that an ambiguous write was applied: the entity holds
	// its nonce (or, want nil, is gone).
	settle := func(rk string, want *modelEntity, what string, cause error) error {
		got, found, err := read(rk)
		if err != nil {
			return err
		}
		if want == nil && !found {
			settled.Add(1)
			return nil
		}
		if want == nil || !found || got.Nonce != want.Nonce || got.V != want.V {
			return fmt.Errorf("%s/%s: %s answered %v, and the entity is %+v (found %v), not the write's %+v", pk, rk, what, cause, got, found, want)
		}
		want.ETag = got.ETag
		settled.Add(1)
		return nil
	}

	// Inserts, one by one.
	for i := range 20 {
		rk := fmt.Sprintf("i%02d", i)
		m := &modelEntity{Nonce: nonce()}
		resp, err := c.AddEntity(ctx, body(rk, m.Nonce, 0), nil)
		switch {
		case isCode(err, "EntityAlreadyExists"):
			if err := settle(rk, m, "insert", err); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("%s/%s: insert: %w", pk, rk, err)
		default:
			m.ETag = string(resp.ETag)
		}
		model[rk] = m
	}
	// A batch of inserts.
	var actions []aztables.TransactionAction
	batch := map[string]*modelEntity{}
	for i := range 10 {
		rk := fmt.Sprintf("b%02d", i)
		batch[rk] = &modelEntity{Nonce: nonce()}
		actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: body(rk, batch[rk].Nonce, 0)})
	}
	if _, err := c.SubmitTransaction(ctx, actions, nil); err != nil {
		if !isCode(err, "EntityAlreadyExists") {
			return fmt.Errorf("%s: batch: %w", pk, err)
		}
		for rk, m := range batch {
			if err := settle(rk, m, "batch", err); err != nil {
				return err
			}
		}
	}
	for rk, m := range batch {
		model[rk] = m
	}
	// Conditional updates, each reading the ETag it is conditional on.
	for i := range 20 {
		rk := fmt.Sprintf("i%02d", i%10)
		cur, found, err := read(rk)
		if err != nil {
			return err
		}
		if !found || cur.Nonce != model[rk].Nonce || cur.V != model[rk].V {
			return fmt.Errorf("%s/%s: read %+v (found %v), want %+v", pk, rk, cur, found, model[rk])
		}
		m := &modelEntity{Nonce: nonce(), V: cur.V + 1}
		etag := azcore.ETag(cur.ETag)
		resp, err := c.UpdateEntity(ctx, body(rk, m.Nonce, m.V), &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeReplace})
		switch {
		case isCode(err, "UpdateConditionNotSatisfied"):
			if err := settle(rk, m, "update", err); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("%s/%s: update: %w", pk, rk, err)
		default:
			m.ETag = string(resp.ETag)
		}
		model[rk] = m
	}
	// Upserts: idempotent by nature.
	for i := range 5 {
		rk := fmt.Sprintf("u%02d", i)
		m := &modelEntity{Nonce: nonce(), V: 7}
		resp, err := c.UpsertEntity(ctx, body(rk, m.Nonce, m.V), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		if err != nil {
			return fmt.Errorf("%s/%s: upsert: %w", pk, rk, err)
		}
		m.ETag = string(resp.ETag)
		model[rk] = m
	}
	// Conditional deletes.
	for i := 10; i < 15; i++ {
		rk := fmt.Sprintf("i%02d", i)
		etag := azcore.ETag(model[rk].ETag)
		_, err := c.DeleteEntity(ctx, pk, rk, &aztables.DeleteEntityOptions{IfMatch: &etag})
		switch {
		case isCode(err, "ResourceNotFound"):
			if err := settle(rk, nil, "delete", err); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("%s/%s: delete: %w", pk, rk, err)
		}
		delete(model, rk)
	}
	return nil
}

// compareWithStore checks that partition pk of table holds exactly model,
// reading the store itself, past any fault.
func compareWithStore(t *testing.T, ts *testServer, table, pk string, model map[string]*modelEntity) {
	t.Helper()
	page, _, err := ts.Store.QueryEntitiesPage(context.Background(), auth.DevAccountName, table,
		partition.EntityQuery{Filter: "PartitionKey eq '" + pk + "'"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range page {
		seen[e.RowKey] = true
		v := storedProps(t, &e)
		m := model[e.RowKey]
		switch {
		case m == nil:
			t.Errorf("%s/%s is stored, but no acknowledged write left it there", pk, e.RowKey)
		case v.Nonce != m.Nonce || v.V != m.V:
			t.Errorf("%s/%s holds nonce %s, V %d; the history says %s, %d", pk, e.RowKey, v.Nonce, v.V, m.Nonce, m.V)
		case m.ETag != "" && e.ETag() != m.ETag:
			t.Errorf("%s/%s has ETag %s, not the %s the client last saw: written again behind its back", pk, e.RowKey, e.ETag(), m.ETag)
		}
	}
	for rk := range model {
		if !seen[rk] {
			t.Errorf("%s/%s was acknowledged but is not stored", pk, rk)
		}
	}
}

// storedProps reads the Nonce and V an entity holds in the store.
func storedProps(t *testing.T, e *partition.StoredEntity) (v struct {
	Nonce string
	V     int
}) {
	t.Helper()
	ent, err := e.Entity()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ent.Properties {
		switch p.Name {
		case "Nonce":
			v.Nonce = p.Value.Str()
		case "V":
			if p.Value.Type() != odata.TypeInt32 {
				t.Fatalf("%s/%s: V is %v", e.PartitionKey, e.RowKey, p.Value)
			}
			v.V = int(p.Value.Int32())
		}
	}
	return v
}
