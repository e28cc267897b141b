package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/internal/syncbuf"
	"github.com/tabuladb/tabula/partition"
)

// TestMain lets the tests run the binary as a real process: the test
// binary re-executed with TABULA_RUN_MAIN=1 is the tabula command.
func TestMain(m *testing.M) {
	if os.Getenv("TABULA_RUN_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// serverProcess is a `tabula serve` child process.
type serverProcess struct {
	cmd     *exec.Cmd
	stderr  *syncbuf.Buffer
	connStr string // the first connection string it printed
	exited  chan struct{}
	err     error // Wait's result, once exited is closed
}

// startServe runs `tabula serve` with args and waits for it to print its
// connection string.
func startServe(t *testing.T, args ...string) *serverProcess {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with variables added to the environment
// (by default AZURITE_ACCOUNTS is emptied, so a developer's setting does
// not leak into the tests).
func startServeEnv(t *testing.T, env []string, args ...string) *serverProcess {
	t.Helper()
	p, err := spawnServeEnv(env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func spawnServe(args ...string) (*serverProcess, error) { return spawnServeEnv(nil, args...) }

func spawnServeEnv(env []string, args ...string) (*serverProcess, error) {
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "TABULA_RUN_MAIN=1", "AZURITE_ACCOUNTS="), env...)
	p := &serverProcess{cmd: cmd, stderr: new(syncbuf.Buffer), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			<-p.exited
			return nil, fmt.Errorf("tabula serve exited before serving (%v): %s", p.err, p.stderr)
		}
		p.connStr = line
		go func() {
			for range lines {
			}
		}()
		return p, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("tabula serve printed no connection string in 30 s: %s", p.stderr)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *serverProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("tabula serve did not exit: %s", p.stderr)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatal(p.err)
	return -1
}

func tableClient(t *testing.T, connStr, table string) *aztables.Client {
	t.Helper()
	// No retries: a request to a killed server fails at once.
	opts := &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}
	svc, err := aztables.NewServiceClientFromConnectionString(connStr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc.NewClient(table)
}

func entityJSON(pk, rk string, n int) []byte {
	b, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "N": n})
	return b
}

func TestServePrintsConnectionStringAndStopsCleanly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", dir)
	if !strings.Contains(p.connStr, "AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=http://127.0.0.1:") {
		t.Fatalf("connection string %q", p.connStr)
	}
	ctx := context.Background()
	c := tableClient(t, p.connStr, "stops")
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddEntity(ctx, entityJSON("p", "r", 7), nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("data directory mode %v, want owner-only 0700", perm)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM: %s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "the store is closed") {
		t.Errorf("no clean-close log line: %s", p.stderr)
	}
	s, err := partition.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetEntity(ctx, "devstoreaccount1", "stops", "p", "r"); err != nil {
		t.Fatalf("entity after a clean stop: %v", err)
	}
}

func TestServeRefusesASecondInstance(t *testing.T) {
	dir := t.TempDir()
	startServe(t, "--addr", "127.0.0.1:0", "--data", dir)
	start := time.Now()
	_, err := spawnServe("--addr", "127.0.0.1:0", "--data", dir)
	if err == nil {
		t.Fatal("a second server on the same data directory started")
	}
	if !strings.Contains(err.Error(), "held by another process") {
		t.Errorf("unclear refusal: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %v, want at once", d)
	}
}

func TestServeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--accounts", "bad"}, 2, "--accounts"},
		{[]string{"serve", "--log-level", "loud"}, 2, "--log-level"},
		{[]string{"serve", "extra"}, 2, "unexpected argument"},
		{[]string{"serve", "--nope"}, 2, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

func TestServeCustomAccountsNeverPrintTheKey(t *testing.T) {
	const key = "a2V5LW9uZS1rZXktb25lLWtleS1vbmUta2V5LW9uZQ=="
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--accounts", "acct1:"+key, "--log-level", "debug")
	if !strings.Contains(p.connStr, "AccountName=acct1;") || strings.Contains(p.connStr, key) {
		t.Fatalf("connection string %q", p.connStr)
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d after SIGINT: %s", code, p.stderr)
	}
	if strings.Contains(p.stderr.String(), key) {
		t.Fatalf("the account key appears in the log: %s", p.stderr)
	}
}

// TestServeReadsAzuriteAccounts takes the accounts from AZURITE_ACCOUNTS,
// as the emulator does, when --accounts is not given: the named account is
// served with its key and the default one is not.
func TestServeReadsAzuriteAccounts(t *testing.T) {
	const key = "c2Vjb25kLWFjY291bnQta2V5LXNlY29uZC1hY2NvdW50"
	p := startServeEnv(t, []string{"AZURITE_ACCOUNTS=envacct:" + key}, "--addr", "127.0.0.1:0", "--data", t.TempDir())
	if !strings.Contains(p.connStr, "AccountName=envacct;") {
		t.Fatalf("connection string %q", p.connStr)
	}
	endpoint := p.connStr[strings.Index(p.connStr, "TableEndpoint=")+len("TableEndpoint="):]
	endpoint = strings.TrimSuffix(strings.TrimSuffix(endpoint, ";"), "/envacct")
	real := "DefaultEndpointsProtocol=http;AccountName=envacct;AccountKey=" + key + ";TableEndpoint=" + endpoint + "/envacct;"
	if _, err := tableClient(t, real, "fromenv").CreateTable(context.Background(), nil); err != nil {
		t.Fatalf("the account from AZURITE_ACCOUNTS: %v", err)
	}
	dev := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;TableEndpoint=" + endpoint + "/devstoreaccount1;"
	if _, err := tableClient(t, dev, "fromenv").CreateTable(context.Background(), nil); err == nil {
		t.Fatal("devstoreaccount1 is served although AZURITE_ACCOUNTS replaced it")
	}
}

// TestInspectARealStore runs `tabula inspect` on a store a server wrote
// and stopped: it names the manifest, the WAL and the tables of every
// level, and says so plainly for a directory with no store.
func TestInspectARealStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", dir)
	c := tableClient(t, p.connStr, "inspected")
	ctx := context.Background()
	if _, err := c.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := c.AddEntity(ctx, entityJSON("p", fmt.Sprintf("r%03d", i), i), nil); err != nil {
			t.Fatal(err)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"inspect", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr.String())
	}
	// The writes are in the WAL (a clean stop does not flush the
	// memtable): inspect names the manifest and the segment, both real
	// files of the store, the segment holding the writes.
	out := stdout.String()
	manifest := filepath.Join(dir, "MANIFEST-000002")
	if !strings.Contains(out, "manifest:   "+manifest+"\n") {
		t.Errorf("inspect does not name %s:\n%s", manifest, out)
	}
	if !strings.Contains(out, "wal:        1 segment(s) [1], replay from 000001\n") {
		t.Errorf("inspect does not list the one WAL segment:\n%s", out)
	}
	for _, name := range []string{"MANIFEST-000002", "000001.log"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v (inspect names a file that is not there or empty)", name, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "000001.log")); fi != nil && fi.Size() < 50*20 {
		t.Errorf("the WAL holds %d bytes after 50 inserts", fi.Size())
	}
	stdout.Reset()
	if code := run([]string{"inspect", t.TempDir()}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "no store yet") {
		t.Errorf("inspect of an empty directory: exit %d, %q", code, stdout.String())
	}
}

// TestServeProfiles checks that --pprof serves profiles on its own address
// and that the Table service's address does not.
func TestServeProfiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pprofAddr := ln.Addr().String()
	ln.Close()
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data"), "--pprof", pprofAddr)

	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "--pprof") {
		t.Fatalf("pprof cmdline: %d %q", resp.StatusCode, body)
	}

	endpoint := p.connStr[strings.Index(p.connStr, "TableEndpoint=")+len("TableEndpoint="):]
	endpoint = strings.TrimSuffix(strings.TrimSuffix(endpoint, ";"), "/devstoreaccount1")
	resp, err = http.Get(endpoint + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "--pprof") {
		t.Fatalf("the table endpoint served a profile: %d %q", resp.StatusCode, body)
	}
}
