package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// ackLog is what the server acknowledged to the writers of a crash test.
type ackLog struct {
	mu       sync.Mutex
	inserts  map[string]string // RowKey in partition "p" -> ETag
	counters map[string]int    // counter RowKey -> last acknowledged N
	batches  map[string]bool   // batch partition -> acknowledged
	tried    map[string]bool   // batch partitions sent, acknowledged or not
	writes   int
}

func newAckLog() *ackLog {
	return &ackLog{inserts: map[string]string{}, counters: map[string]int{}, batches: map[string]bool{}, tried: map[string]bool{}}
}

// writer inserts single entities, bumps its counter entity with merges
// and commits batches of 5 inserts, recording what was acknowledged,
// until a request fails (the server is gone) or stop closes.
func (l *ackLog) writer(c *aztables.Client, round, w int, stop <-chan struct{}) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
	counter := fmt.Sprintf("counter-%d", w)
	l.mu.Lock()
	n := l.counters[counter]
	l.mu.Unlock()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		switch rng.IntN(3) {
		case 0:
			rk := fmt.Sprintf("r%d-%d-%06d", round, w, i)
			resp, err := c.AddEntity(ctx, entityJSON("p", rk, i), nil)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.inserts[rk] = string(resp.ETag)
			l.writes++
			l.mu.Unlock()
		case 1:
			n++
			_, err := c.UpsertEntity(ctx, entityJSON("c", counter, n), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge})
			if err != nil {
				return
			}
			l.mu.Lock()
			l.counters[counter] = n
			l.writes++
			l.mu.Unlock()
		case 2:
			pk := fmt.Sprintf("b%d-%d-%06d", round, w, i)
			actions := make([]aztables.TransactionAction, 5)
			for j := range actions {
				actions[j] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: entityJSON(pk, fmt.Sprint(j), j)}
			}
			l.mu.Lock()
			l.tried[pk] = true
			l.mu.Unlock()
			if _, err := c.SubmitTransaction(ctx, actions, nil); err != nil {
				return
			}
			l.mu.Lock()
			l.batches[pk] = true
			l.writes++
			l.mu.Unlock()
		}
	}
}

// check verifies the store against the log: every acknowledged insert
// with its ETag, every counter at least where it was acknowledged, every
// acknowledged batch whole and every other batch whole or absent.
func (l *ackLog) check(t *testing.T, c *aztables.Client) {
	t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	for rk, etag := range l.inserts {
		e, err := c.GetEntity(ctx, "p", rk, nil)
		if err != nil {
			t.Fatalf("acknowledged insert %s lost: %v", rk, err)
		}
		if string(e.ETag) != etag {
			t.Fatalf("insert %s has ETag %s, was acknowledged with %s", rk, e.ETag, etag)
		}
	}
	for rk, n := range l.counters {
		e, err := c.GetEntity(ctx, "c", rk, nil)
		if err != nil {
			t.Fatalf("counter %s lost: %v", rk, err)
		}
		var v struct{ N int }
		json.Unmarshal(e.Value, &v)
		if v.N < n {
			t.Fatalf("counter %s is %d, was acknowledged at %d", rk, v.N, n)
		}
	}
	for pk := range l.tried {
		pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq '" + pk + "'")})
		count := 0
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			count += len(page.Entities)
		}
		if count != 0 && count != 5 || l.batches[pk] && count != 5 {
			t.Fatalf("batch %s: %d of 5 entities (acknowledged: %v)", pk, count, l.batches[pk])
		}
	}
}

// TestServeCrashUnderLoad kills the server with SIGKILL while concurrent
// clients insert, update and commit batches, restarts it on the same
// data, and checks every acknowledged write and the atomicity of every
// batch; a last round stops it with SIGTERM instead.
func TestServeCrashUnderLoad(t *testing.T) {
	dir := t.TempDir()
	log := newAckLog()
	const rounds, writers = 4, 4
	for round := range rounds + 1 {
		p := startServe(t, "--addr", "127.0.0.1:0", "--data", dir)
		c := tableClient(t, p.connStr, "durable")
		if round == 0 {
			if _, err := c.CreateTable(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		}
		log.check(t, c)
		if round == rounds {
			break
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() { log.writer(c, round, w, stop) })
		}
		time.Sleep(time.Duration(150+100*round) * time.Millisecond)
		graceful := round == rounds-1
		if graceful {
			// SIGTERM: requests in flight finish; nothing acknowledged is lost.
			p.cmd.Process.Signal(syscall.SIGTERM)
		} else {
			p.cmd.Process.Kill()
		}
		code := p.wait(t)
		close(stop)
		wg.Wait()
		if graceful && code != 0 {
			t.Fatalf("exit code %d after SIGTERM: %s", code, p.stderr)
		}
	}
	if log.writes == 0 {
		t.Fatal("no write was acknowledged before the kills")
	}
	t.Logf("%d acknowledged writes (%d inserts, %d batches of 5, %d counters) survived %d kill -9s and a SIGTERM",
		log.writes, len(log.inserts), len(log.batches), len(log.counters), rounds-1)
}
