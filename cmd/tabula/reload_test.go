package main

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Keys of the rotation tests (base64 of distinct bytes; never printed).
const (
	keyA = "cm90YXRpb24ta2V5LUEtcm90YXRpb24ta2V5LUE="
	keyB = "cm90YXRpb24ta2V5LUItcm90YXRpb24ta2V5LUI="
	keyC = "cm90YXRpb24ta2V5LUMtcm90YXRpb24ta2V5LUM="
)

// writeAccountsFile replaces path's contents the way the docs ask an
// operator to: a new file renamed over the old, so a SIGHUP never reads a
// half-written one.
func writeAccountsFile(t *testing.T, path, contents string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// hangup sends SIGHUP and waits for the log line the reload writes: the
// n-th occurrence of want.
func (p *serverProcess) hangup(t *testing.T, want string, n int) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.stderr.String(), want) < n {
		select {
		case <-p.exited:
			t.Fatalf("tabula serve exited on SIGHUP (%v): %s", p.err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log 10 s after SIGHUP: %s", want, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// endpointOf reads the endpoint (http://host:port) from a printed
// connection string.
func endpointOf(t *testing.T, connStr string) string {
	t.Helper()
	_, after, ok := strings.Cut(connStr, "TableEndpoint=")
	if !ok {
		t.Fatalf("connection string %q", connStr)
	}
	u, err := url.Parse(strings.TrimSuffix(after, ";"))
	if err != nil {
		t.Fatal(err)
	}
	return u.Scheme + "://" + u.Host
}

// accountClient is a client of table in account, signed with key.
func accountClient(t *testing.T, endpoint, account, key, table string) *aztables.Client {
	t.Helper()
	return tableClient(t, "DefaultEndpointsProtocol=http;AccountName="+account+";AccountKey="+key+
		";TableEndpoint="+endpoint+"/"+account+";", table)
}

// sasClient is a client of table that authenticates with the table SAS
// that owner (a Shared Key client) signs. aztables v1.4.0 drops the "/"
// between a path-style endpoint and the table in the URL it returns, so
// the client is built from the token alone.
func sasClient(t *testing.T, endpoint, account, table string, owner *aztables.Client) *aztables.Client {
	t.Helper()
	now := time.Now().UTC()
	sasURL, err := owner.GetTableSASURL(aztables.SASPermissions{Read: true}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(sasURL)
	if err != nil {
		t.Fatal(err)
	}
	opts := &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}
	c, err := aztables.NewClientWithNoCredential(endpoint+"/"+account+"/"+table+"?"+u.RawQuery, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServeRotatesKeysOnSIGHUP rotates an account's key the way the
// service's two keys are meant for, on one running process: key A alone;
// A as key1 and B as key2, both accepted; B alone, A refused with 403
// AuthenticationFailed, SAS tokens signed with B accepted and with A
// refused; then a malformed file, refused with a logged error while B
// keeps working. Every step is the same process, never restarted.
func TestServeRotatesKeysOnSIGHUP(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "accounts")
	writeAccountsFile(t, file, "acct1:"+keyA+"\n")
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--accounts-file", file)
	pid := p.cmd.Process.Pid
	endpoint := endpointOf(t, p.connStr)
	if !strings.Contains(p.connStr, "AccountName=acct1;AccountKey=<the account's key>;") {
		t.Fatalf("connection string %q", p.connStr)
	}

	works := func(what string, c *aztables.Client) {
		t.Helper()
		if _, err := c.GetEntity(ctx, "p", "r", nil); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refused := func(what string, c *aztables.Client) {
		t.Helper()
		_, err := c.GetEntity(ctx, "p", "r", nil)
		var re *azcore.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden || re.ErrorCode != "AuthenticationFailed" {
			t.Fatalf("%s: %v, want 403 AuthenticationFailed", what, err)
		}
	}

	withA := accountClient(t, endpoint, "acct1", keyA, "rotated")
	withB := accountClient(t, endpoint, "acct1", keyB, "rotated")
	if _, err := withA.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := withA.AddEntity(ctx, entityJSON("p", "r", 1), nil); err != nil {
		t.Fatal(err)
	}
	works("key A, the file's key", withA)
	refused("key B before it is in the file", withB)
	sasA := sasClient(t, endpoint, "acct1", "rotated", withA)
	works("a SAS signed with key A", sasA)

	// Step 1: B joins as key2; both keys sign.
	writeAccountsFile(t, file, "acct1:"+keyA+":"+keyB+"\n")
	p.hangup(t, "accounts reloaded", 1)
	works("key A as key1", withA)
	works("key B as key2", withB)

	// Step 2: A leaves; a second account arrives on a line of its own.
	writeAccountsFile(t, file, "acct1:"+keyB+"\nacct2:"+keyC+"\n")
	p.hangup(t, "accounts reloaded", 2)
	refused("key A after it left the file", withA)
	refused("a SAS signed with key A after it left", sasA)
	works("key B alone", withB)
	works("a SAS signed with key B", sasClient(t, endpoint, "acct1", "rotated", withB))
	if _, err := accountClient(t, endpoint, "acct2", keyC, "second").CreateTable(ctx, nil); err != nil {
		t.Fatalf("the account the reload added: %v", err)
	}

	// Step 3: a malformed file is refused whole; the set in force stays.
	const badKey = "bm90LWEta2V5LW5vdC1hLWtleQ=="
	writeAccountsFile(t, file, "acct1:"+keyA+"\nacct2:"+badKey+"!\n")
	p.hangup(t, "accounts file refused", 1)
	works("key B after a malformed file", withB)
	refused("key A, which the malformed file's first line names", withA)
	// A missing file too.
	os.Remove(file)
	p.hangup(t, "accounts file refused", 2)
	works("key B after the file vanished", withB)

	if p.cmd.Process.Pid != pid {
		t.Fatal("the process changed")
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM: %s", code, p.stderr)
	}
	log := p.stderr.String()
	for _, secret := range []string{keyA, keyB, keyC, badKey} {
		if strings.Contains(log, secret) {
			t.Fatalf("a key appears in the log: %s", log)
		}
	}
	if !strings.Contains(log, `file=`+file) || !strings.Contains(log, `acct2\": key1 is not valid`) {
		t.Errorf("the refusal does not name the file and the fault: %s", log)
	}
}

// TestServeSIGHUPWithoutAFile: accounts from AZURITE_ACCOUNTS cannot
// change in a running process; SIGHUP says so and the server keeps
// serving (SIGHUP's default action would have killed it).
func TestServeSIGHUPWithoutAFile(t *testing.T) {
	p := startServeEnv(t, []string{"AZURITE_ACCOUNTS=envacct:" + keyA}, "--addr", "127.0.0.1:0", "--data", t.TempDir())
	p.hangup(t, "no --accounts-file to re-read", 1)
	c := accountClient(t, endpointOf(t, p.connStr), "envacct", keyA, "still")
	if _, err := c.CreateTable(context.Background(), nil); err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
}

// TestServeAccountsFileFlags: where the accounts come from at start.
func TestServeAccountsFileFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeAccountsFile(t, good, "filacct:"+keyA+"\r\n")
	bad := filepath.Join(dir, "bad")
	writeAccountsFile(t, bad, "filacct:"+keyA+":"+keyB+":"+keyC)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--accounts-file", good, "--accounts", "x:" + keyA}, "--accounts and --accounts-file: give one"},
		{[]string{"--accounts-file", filepath.Join(dir, "missing")}, "--accounts-file: open " + filepath.Join(dir, "missing")},
		{[]string{"--accounts-file", bad}, "--accounts-file " + bad + `: auth: account "filacct": want name:key1[:key2]`},
	} {
		// A process, so a server that wrongly starts is stopped, not left
		// serving inside the test.
		p, err := spawnServe(append(c.args, "--addr", "127.0.0.1:0", "--data", t.TempDir())...)
		if err == nil {
			p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("%v: the server started", c.args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "exit status 2") || !strings.Contains(msg, c.want) {
			t.Errorf("%v: %v; want exit status 2 and %q", c.args, err, c.want)
		}
	}

	// The file takes precedence over AZURITE_ACCOUNTS.
	p := startServeEnv(t, []string{"AZURITE_ACCOUNTS=envacct:" + keyB}, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--accounts-file", good)
	if !strings.Contains(p.connStr, "AccountName=filacct;") {
		t.Fatalf("connection string %q: want the file's account", p.connStr)
	}
}
