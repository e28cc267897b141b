package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/server/devcert"
)

// trustingClient is an HTTP client that trusts only the PEM certificate
// at certPath, speaking HTTP/2 where the server offers it.
func trustingClient(t *testing.T, certPath string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", certPath)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
}

// TestServeHTTPSMakesAndReusesACertificate starts `serve --https` twice on
// one data directory: the first start writes a certificate the SDK can
// trust and talks HTTP/2 over; the second reuses it.
func TestServeHTTPSMakesAndReusesACertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", dir, "--https")
	if !strings.HasPrefix(p.connStr, "DefaultEndpointsProtocol=https;") || !strings.Contains(p.connStr, "TableEndpoint=https://127.0.0.1:") {
		t.Fatalf("connection string %q", p.connStr)
	}
	certPath := filepath.Join(dir, devcert.CertFile)
	first, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	// The log reaches p.stderr through os/exec's copying goroutine, which
	// may lag the connection string on stdout.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), certPath); {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not name the certificate to trust: %s", p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	client := trustingClient(t, certPath)
	svc, err := aztables.NewServiceClientFromConnectionString(p.connStr, &aztables.ClientOptions{ClientOptions: policy.ClientOptions{Transport: client}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, "secure", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.NewClient("secure").AddEntity(ctx, entityJSON("p", "r", 1), nil); err != nil {
		t.Fatal(err)
	}
	endpoint := p.connStr[strings.Index(p.connStr, "TableEndpoint=")+len("TableEndpoint="):]
	resp, err := client.Get(strings.TrimSuffix(endpoint, ";") + "/Tables")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusForbidden { // unsigned: refused, but over HTTP/2
		t.Fatalf("unsigned GET over TLS: %s %d", resp.Proto, resp.StatusCode)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr)
	}

	p = startServe(t, "--addr", "127.0.0.1:0", "--data", dir, "--https")
	second, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatal("the second start replaced the certificate")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.stderr.String(), "reusing") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the log line may trail the connection string
	}
	if !strings.Contains(p.stderr.String(), "reusing") {
		t.Errorf("the second start does not say it reuses the certificate: %s", p.stderr)
	}
}

// TestServeHTTPSWithGivenCertificate serves with --cert and --key files.
func TestServeHTTPSWithGivenCertificate(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := devcert.Generate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--cert", certPath, "--key", keyPath)
	svc, err := aztables.NewServiceClientFromConnectionString(p.connStr,
		&aztables.ClientOptions{ClientOptions: policy.ClientOptions{Transport: trustingClient(t, certPath)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateTable(context.Background(), "given", nil); err != nil {
		t.Fatal(err)
	}
}

func TestServeTLSFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--cert", "c.pem"}, "--cert and --key go together"},
		{[]string{"serve", "--key", "k.pem"}, "--cert and --key go together"},
		{[]string{"serve", "--https", "--cert", "c.pem", "--key", "k.pem"}, "not both"},
		{[]string{"serve", "--oauth", "basic"}, "--oauth needs HTTPS"},
		{[]string{"serve", "--https", "--oauth", "full"}, "the only level is basic"},
		{[]string{"serve", "--max-conns", "0"}, "--max-conns"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	// Files that are not a certificate and key stop the start, naming them.
	bad := filepath.Join(dir, "bad.pem")
	os.WriteFile(bad, []byte("junk"), 0o600)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "d"), "--cert", bad, "--key", bad}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), bad) {
		t.Errorf("junk certificate: exit %d, stderr %q", code, stderr.String())
	}
}
