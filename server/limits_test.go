package server_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// procStatusMiB reads a memory figure (VmRSS, VmHWM) of this process from
// /proc/self/status, in MiB; 0 where /proc is missing.
func procStatusMiB(field string) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return kb >> 10
		}
	}
	return 0
}

var walkEntities = flag.Int("walk-entities", 100_000, "entities in TestContinuationWalk (the issue's figure is 1,000,000)")

// TestConnectionsAndSlowClients holds 1,000 keep-alive connections and
// 100 clients trickling a header byte at a time, while ordinary requests
// keep being served; once all are gone, no goroutine is left behind.
func TestConnectionsAndSlowClients(t *testing.T) {
	baseline := runtime.NumGoroutine()
	ts := startServer(t, &server.Options{ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second})
	addr := strings.TrimPrefix(ts.Endpoint, "http://")

	var slow []net.Conn
	for range 100 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, conn)
	}
	trickleDone := make(chan struct{})
	go func() {
		defer close(trickleDone)
		line := "GET /devstoreaccount1/Tables HTTP/1.1\r\n"
		for i := 0; i < len(line); i++ {
			for _, conn := range slow {
				conn.Write([]byte{line[i]})
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// 1,000 connections, each with a request in flight at the same time.
	const conns = 1000
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	clients := make([]*http.Client, conns)
	start := make(chan struct{})
	for i := range conns {
		clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		wg.Go(func() {
			<-start
			resp, err := clients[i].Do(rawRequest(t, ts, "GET", "/Tables", nil, true))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	t.Logf("1,000 connections and 100 slow clients: process RSS %d MiB (peak %d MiB)", procStatusMiB("VmRSS"), procStatusMiB("VmHWM"))
	for err := range errs {
		t.Fatalf("one of 1,000 concurrent requests: %v", err)
	}
	if resp, _ := send(t, &http.Client{}, rawRequest(t, ts, "GET", "/Tables", nil, true)); resp.StatusCode != 200 {
		t.Fatalf("an ordinary request during the slow clients: %d", resp.StatusCode)
	}
	<-trickleDone

	for _, c := range clients {
		c.CloseIdleConnections()
	}
	for _, conn := range slow {
		conn.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline+20 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// The server, its store and the test's own helpers run a handful.
	if n := runtime.NumGoroutine(); n > baseline+20 {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines left, %d before: a leak?\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

// TestTenThousandTables lists 10,000 tables page by page over HTTP.
func TestTenThousandTables(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	for i := range 10_000 {
		if _, err := ts.Store.CreateTable(ctx, auth.DevAccountName, fmt.Sprintf("t%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c := &http.Client{}
	next, seen, pages := "", 0, 0
	for {
		path := "/Tables"
		if next != "" {
			path += "?NextTableName=" + next
		}
		resp, body := send(t, c, rawRequest(t, ts, "GET", path, nil, true, "Accept", "application/json;odata=nometadata"))
		var feed struct{ Value []struct{ TableName string } }
		if resp.StatusCode != 200 || json.Unmarshal(body, &feed) != nil {
			t.Fatalf("page %d: %d %.200s", pages, resp.StatusCode, body)
		}
		for _, tb := range feed.Value {
			if want := fmt.Sprintf("t%05d", seen); tb.TableName != want {
				t.Fatalf("table %d is %s, want %s", seen, tb.TableName, want)
			}
			seen++
		}
		pages++
		if next = resp.Header.Get("x-ms-continuation-NextTableName"); next == "" {
			break
		}
	}
	if seen != 10_000 || pages != 10 {
		t.Fatalf("%d tables in %d pages", seen, pages)
	}
}

// TestContinuationWalk walks a large table page by page over HTTP and
// checks that every entity comes once, in order, while the server's heap
// stays bounded by a page, not the table.
//
// The store's block cache is 4 MiB, so what reading may legitimately
// keep is that, a page and its pooled buffer: the bound is 24 MiB. The
// table's JSON is about 36 MB (100,000 entities of 360 bytes), so a
// server that buffered the table, or pages it had sent, would cross it.
func TestContinuationWalk(t *testing.T) {
	ts := serveStore(t, openStore(t, &partition.Options{LSM: lsm.Options{CacheSize: 4 << 20}}), nil)
	ctx := context.Background()
	if _, err := ts.Store.CreateTable(ctx, auth.DevAccountName, "big"); err != nil {
		t.Fatal(err)
	}
	n := *walkEntities
	pad := strings.Repeat("x", 300)
	for start := 0; start < n; start += 100 {
		ops := make([]partition.Op, 0, 100)
		pk := fmt.Sprintf("p%05d", start/1000)
		for i := start; i < min(n, start+100); i++ {
			e := &odata.Entity{PartitionKey: pk, RowKey: fmt.Sprintf("r%07d", i),
				Properties: []odata.Property{{Name: "N", Value: odata.Int32Value(int32(i))}, {Name: "Pad", Value: odata.StringValue(pad)}}}
			ops = append(ops, partition.Op{Kind: partition.OpInsert, Entity: e})
		}
		if _, err := ts.Store.ExecuteBatch(ctx, auth.DevAccountName, "big", ops); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	var before, peak runtime.MemStats
	runtime.ReadMemStats(&before)
	c := &http.Client{}
	nextPK, nextRK, seen, pages := "", "", 0, 0
	for {
		path := "/big()?$filter=N%20ge%200"
		if nextPK != "" {
			path += "&NextPartitionKey=" + nextPK + "&NextRowKey=" + nextRK
		}
		resp, body := send(t, c, rawRequest(t, ts, "GET", path, nil, true, "Accept", "application/json;odata=nometadata"))
		var feed struct{ Value []struct{ N int } }
		if resp.StatusCode != 200 || json.Unmarshal(body, &feed) != nil {
			t.Fatalf("page %d: %d %.200s", pages, resp.StatusCode, body)
		}
		for _, e := range feed.Value {
			if e.N != seen {
				t.Fatalf("entity %d has N %d", seen, e.N)
			}
			seen++
		}
		pages++
		if pages%10 == 0 {
			runtime.GC() // count what the server holds, not garbage
			runtime.ReadMemStats(&peak)
			if grown := int64(peak.HeapInuse) - int64(before.HeapInuse); grown > 24<<20 {
				t.Fatalf("heap grew by %d MiB after %d entities", grown>>20, seen)
			}
		}
		nextPK, nextRK = resp.Header.Get("x-ms-continuation-NextPartitionKey"), resp.Header.Get("x-ms-continuation-NextRowKey")
		if nextPK == "" {
			break
		}
	}
	if seen != n {
		t.Fatalf("walked %d of %d entities", seen, n)
	}
	runtime.ReadMemStats(&peak)
	t.Logf("walked %d entities in %d pages; heap in use %d MiB before, %d MiB after; process RSS %d MiB (peak %d MiB, including the load)",
		n, pages, before.HeapInuse>>20, peak.HeapInuse>>20, procStatusMiB("VmRSS"), procStatusMiB("VmHWM"))
}
