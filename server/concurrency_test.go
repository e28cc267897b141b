package server_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// entityValue reads property N of an entity response, or -1 when the
// entity does not exist.
func entityValue(t *testing.T, status int, body []byte) int {
	if status == http.StatusNotFound {
		return -1
	}
	var m struct{ N int }
	if status != http.StatusOK || json.Unmarshal(body, &m) != nil {
		t.Errorf("read: %d %s", status, body)
		return -2
	}
	return m.N
}

// TestIfMatchRace has clients race read-modify-write increments with
// If-Match: per ETag exactly one writer wins, and no increment is lost.
func TestIfMatchRace(t *testing.T) {
	ts := startServer(t, nil)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	send(t, c, rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"race"}`), true))
	send(t, c, rawRequest(t, ts, "POST", "/race", []byte(`{"PartitionKey":"p","RowKey":"r","N":0}`), true))
	const path = "/race(PartitionKey='p',RowKey='r')"

	var (
		mu       sync.Mutex
		winners  = map[string]int{} // ETag read -> successful writes made with it
		wins     atomic.Int64
		attempts atomic.Int64
		wg       sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 25 {
				resp, body := send(t, c, rawRequest(t, ts, "GET", path, nil, true))
				n := entityValue(t, resp.StatusCode, body)
				etag := resp.Header.Get("ETag")
				resp, body = send(t, c, rawRequest(t, ts, "PUT", path, fmt.Appendf(nil, `{"N":%d}`, n+1), true, "If-Match", etag))
				attempts.Add(1)
				switch resp.StatusCode {
				case http.StatusNoContent:
					wins.Add(1)
					mu.Lock()
					winners[etag]++
					mu.Unlock()
				case http.StatusPreconditionFailed:
				default:
					t.Errorf("conditional update: %d %s", resp.StatusCode, body)
				}
			}
		})
	}
	wg.Wait()
	for etag, n := range winners {
		if n != 1 {
			t.Errorf("%d writes won with ETag %s", n, etag)
		}
	}
	resp, body := send(t, c, rawRequest(t, ts, "GET", path, nil, true))
	if got := entityValue(t, resp.StatusCode, body); got != int(wins.Load()) {
		t.Fatalf("N = %d after %d winning increments: an update was lost", got, wins.Load())
	}
	t.Logf("%d conditional updates raced, %d won", attempts.Load(), wins.Load())
}

// TestQueriesNeverSeePartialBatch races batches that rewrite a whole
// partition against queries of it: every query sees one generation.
func TestQueriesNeverSeePartialBatch(t *testing.T) {
	ts := startServer(t, nil)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	send(t, c, rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"items"}`), true))
	upserts := func(gen int) []byte {
		parts := make([]string, 20)
		for i := range parts {
			parts[i] = fmt.Sprintf("PUT http://127.0.0.1/devstoreaccount1/items(PartitionKey='b',RowKey='r%02d') HTTP/1.1\r\n"+
				"Content-Type: application/json\r\n\r\n{\"Gen\":%d}", i, gen)
		}
		return []byte(batchBody(parts...))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for gen := range 40 {
			resp, body := send(t, c, rawRequest(t, ts, "POST", "/$batch", upserts(gen), true, "Content-Type", batchCT))
			if resp.StatusCode != http.StatusAccepted || resp.Header.Get("x-ms-error-code") != "" {
				t.Errorf("batch %d: %d %.300s", gen, resp.StatusCode, body)
			}
		}
	})
	var queries atomic.Int64
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				resp, body := send(t, c, rawRequest(t, ts, "GET", "/items()?$filter=PartitionKey%20eq%20'b'", nil, true))
				var feed struct{ Value []struct{ Gen int } }
				if resp.StatusCode != 200 || json.Unmarshal(body, &feed) != nil {
					t.Errorf("query: %d %s", resp.StatusCode, body)
					return
				}
				queries.Add(1)
				if len(feed.Value) != 0 && len(feed.Value) != 20 {
					t.Errorf("a query saw %d of a batch's 20 entities", len(feed.Value))
				}
				for _, e := range feed.Value {
					if e.Gen != feed.Value[0].Gen {
						t.Errorf("a query saw generations %d and %d together", feed.Value[0].Gen, e.Gen)
						break
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d queries raced 40 batches", queries.Load())
}

// registerOp is an operation on one entity, for the linearizability check.
type registerOp struct {
	Key  int
	Kind string // get, put, insert, update, delete
	N    int
}

// registerModel is the sequential specification of one entity: its N, or
// -1 when absent; outputs are HTTP statuses, and N for reads.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(registerOp).Key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return -1 },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(int), input.(registerOp), output.([2]int)
		status, n := out[0], out[1]
		switch in.Kind {
		case "get":
			if s == -1 {
				return status == 404, s
			}
			return status == 200 && n == s, s
		case "put":
			return status == 204, in.N
		case "insert":
			if s == -1 {
				return status == 201 || status == 204, in.N
			}
			return status == 409, s
		case "update":
			if s == -1 {
				return status == 404, s
			}
			return status == 204, in.N
		case "delete":
			if s == -1 {
				return status == 404, s
			}
			return status == 204, -1
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%v -> %v", input, output)
	},
}

// TestLinearizableEntities records concurrent histories of reads, upserts,
// inserts, conditional updates and deletes on a few entities and checks
// that each entity's history is linearizable.
func TestLinearizableEntities(t *testing.T) {
	ts := startServer(t, nil)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	send(t, c, rawRequest(t, ts, "POST", "/Tables", []byte(`{"TableName":"lin"}`), true))
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
	)
	start := time.Now()
	for client := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(client), 7))
			for i := range 60 {
				op := registerOp{Key: rng.IntN(3), Kind: []string{"get", "get", "put", "insert", "update", "delete"}[rng.IntN(6)], N: client*1000 + i}
				path := fmt.Sprintf("/lin(PartitionKey='p',RowKey='k%d')", op.Key)
				body := fmt.Appendf(nil, `{"N":%d}`, op.N)
				var method string
				var header []string
				switch op.Kind {
				case "get":
					method, body = "GET", nil
				case "put":
					method = "PUT"
				case "insert":
					method, path = "POST", "/lin"
					body = fmt.Appendf(nil, `{"PartitionKey":"p","RowKey":"k%d","N":%d}`, op.Key, op.N)
					header = []string{"Prefer", "return-no-content"}
				case "update":
					method, header = "PUT", []string{"If-Match", "*"}
				case "delete":
					method, body, header = "DELETE", nil, []string{"If-Match", "*"}
				}
				req := rawRequest(t, ts, method, path, body, true, header...)
				call := time.Since(start).Nanoseconds()
				resp, respBody := send(t, c, req)
				ret := time.Since(start).Nanoseconds()
				out := [2]int{resp.StatusCode, 0}
				if op.Kind == "get" && resp.StatusCode == 200 {
					out[1] = entityValue(t, resp.StatusCode, respBody)
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: client, Input: op, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res, _ := porcupine.CheckOperationsVerbose(registerModel, history, 30*time.Second)
	if res != porcupine.Ok {
		t.Fatalf("the history of %d operations is not linearizable (%s)", len(history), res)
	}
	t.Logf("%d concurrent operations on 3 entities: linearizable", len(history))
}

// TestRegisterModelRejectsStaleReads guards the check above against a
// model that accepts anything: a read that misses a completed write fails.
func TestRegisterModelRejectsStaleReads(t *testing.T) {
	stale := []porcupine.Operation{
		{Input: registerOp{Kind: "put", N: 1}, Call: 0, Output: [2]int{204, 0}, Return: 10},
		{Input: registerOp{Kind: "get"}, Call: 20, Output: [2]int{404, 0}, Return: 30},
	}
	if porcupine.CheckOperations(registerModel, stale) {
		t.Fatal("a read after a completed write that misses it passed as linearizable")
	}
	fresh := []porcupine.Operation{stale[0], {Input: registerOp{Kind: "get"}, Call: 20, Output: [2]int{200, 1}, Return: 30}}
	if !porcupine.CheckOperations(registerModel, fresh) {
		t.Fatal("a correct history failed the check")
	}
}
