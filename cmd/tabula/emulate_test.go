package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// parseEmulate parses args with serve's emulation flags alone.
func parseEmulate(t *testing.T, args ...string) (*server.Limits, *server.FaultSpec, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var ef emulateFlags
	ef.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	return ef.options(fs)
}

func TestEmulateFlags(t *testing.T) {
	l, f, err := parseEmulate(t)
	if err != nil || l != nil || f != nil {
		t.Fatalf("no flags: %v %v %v; want everything off", l, f, err)
	}
	l, f, err = parseEmulate(t, "--emulate-limits")
	if err != nil || f != nil || l == nil || l.PartitionRate != 2000 || l.AccountRate != 20000 {
		t.Fatalf("--emulate-limits: %+v %v %v", l, f, err)
	}
	l, _, err = parseEmulate(t, "--emulate-limits", "--partition-rate", "50", "--account-rate=1e3")
	if err != nil || l.PartitionRate != 50 || l.AccountRate != 1000 {
		t.Fatalf("rates: %+v %v", l, err)
	}
	_, f, err = parseEmulate(t, "--faults", "seed=3;insert:503=5%")
	if err != nil || f == nil || f.String() != "seed=3;insert:503=0.05" {
		t.Fatalf("--faults: %v %v", f, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--emulate-limits", "--partition-rate", "0"}, "--partition-rate 0: want a positive number"},
		{[]string{"--emulate-limits", "--partition-rate", "-5"}, "--partition-rate -5: want a positive number"},
		{[]string{"--emulate-limits", "--account-rate", "0"}, "--account-rate 0: want a positive number"},
		{[]string{"--emulate-limits", "--account-rate", "NaN"}, "--account-rate NaN: want a positive number"},
		{[]string{"--emulate-limits", "--account-rate", "+Inf"}, "--account-rate +Inf: want a positive number"},
		{[]string{"--partition-rate", "100"}, "--partition-rate needs --emulate-limits"},
		{[]string{"--account-rate", "100"}, "--account-rate needs --emulate-limits"},
		{[]string{"--faults", "insert:503=2"}, `--faults: "insert:503=2": 503=2: a rate is from 0 to 1`},
		{[]string{"--faults", "seed=1;bogus=1"}, `--faults: "bogus=1": unknown fault "bogus"`},
	} {
		_, _, err := parseEmulate(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestInspectHot runs tabula inspect --hot against a live server.
func TestInspectHot(t *testing.T) {
	store, err := partition.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if _, err := store.CreateTable(ctx, auth.DevAccountName, "orders"); err != nil {
		t.Fatal(err)
	}
	srv := server.New(store, &server.Options{Limits: &server.Limits{}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	}()
	// Three signed point gets (of an entity that is not there) load one
	// partition's bucket.
	for range 3 {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/devstoreaccount1/orders(PartitionKey='pk1',RowKey='r')", nil)
		signForTest(t, req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("get: %d", resp.StatusCode)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"inspect", "--hot", ln.Addr().String(), "-n", "5"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"limits: 2000 entities/s a partition, 20000 an account; 1 partitions tracked",
		`devstoreaccount1  orders  "pk1"`, "SERVED/S"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "--hot"}, 2, "usage: tabula inspect --hot"},
		{[]string{"inspect", "--hot", "-n", "0", ln.Addr().String()}, 2, "-n 0: want 1 to 1000"},
		{[]string{"inspect", "--hot", "127.0.0.1:1"}, 1, "tabula inspect --hot:"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d, %q", c.args, code, errOut.String(), c.code, c.want)
		}
	}
}

// signForTest signs req with Shared Key Lite for the development account.
func signForTest(t *testing.T, req *http.Request) {
	t.Helper()
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=nometadata")
	sig, err := auth.SignString(auth.DevAccountKey, date+"\n/"+auth.DevAccountName+req.URL.EscapedPath())
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "SharedKeyLite "+auth.DevAccountName+":"+sig)
}

// TestAnnounce checks the start log names the limits, and the faults in
// canonical form with the seed they are drawn with, so a run can be
// replayed.
func TestAnnounce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	limits, faults, err := parseEmulate(t, "--emulate-limits", "--partition-rate", "50", "--faults", "insert:503=5%")
	if err != nil {
		t.Fatal(err)
	}
	store, err := partition.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := server.New(store, &server.Options{Limits: limits, Faults: faults})
	announce(log, limits, faults, srv)
	seed, ok := srv.FaultSeed()
	if !ok {
		t.Fatal("no seed")
	}
	for _, want := range []string{"partition_rate=50 account_rate=20000", `spec="insert:503=0.05" seed=` + fmt.Sprint(seed)} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestServeEmulatesAndKeepsInMemory runs the real `tabula serve` with
// the emulation flags and --in-memory: an injected fault reaches the SDK
// with the service's answer, the start log names the spec, bad flags
// exit 2, and nothing of the in-memory store is left on disk.
func TestServeEmulatesAndKeepsInMemory(t *testing.T) {
	data := t.TempDir()
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", data, "--in-memory", "--emulate-limits", "--faults", "seed=7;insert:503=1")
	ctx := context.Background()
	c := tableClient(t, p.connStr, "emulated")
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 503 || re.ErrorCode != "ServerBusy" {
		t.Fatalf("insert under insert:503=1: %v, want 503 ServerBusy", err)
	}
	if _, err := c.UpsertEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatalf("an upsert, which the spec spares: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "seed=7;insert:503=1") {
		t.Errorf("the start log does not name the fault spec:\n%s", p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(data, "CURRENT")); !os.IsNotExist(err) {
		t.Errorf("--in-memory wrote a store into --data (%v)", err)
	}
	for _, args := range [][]string{
		{"--partition-rate", "10"},
		{"--faults", "insert:503=2"},
		{"--in-memory", "--join", "127.0.0.1:1", "--node-addr", "127.0.0.1:1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"serve", "--data", t.TempDir()}, args...), &out, &errOut); code != 2 {
			t.Errorf("serve %q: exit %d, want 2: %s", args, code, errOut.String())
		}
	}
}
