package devcert

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestEnsureCreatesThenReuses(t *testing.T) {
	dir := t.TempDir()
	cert, path, created, err := Ensure(dir, now)
	if err != nil || !created || path != filepath.Join(dir, CertFile) {
		t.Fatalf("first Ensure: created=%v path=%q err=%v", created, path, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	again, _, created, err := Ensure(dir, now.Add(24*time.Hour))
	if err != nil || created {
		t.Fatalf("second Ensure: created=%v err=%v", created, err)
	}
	if !bytes.Equal(again.Certificate[0], cert.Certificate[0]) {
		t.Fatal("the second start made a new certificate instead of reusing the first")
	}

	// The certificate, trusted as its own root, is valid for every host a
	// client reaches the server by.
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "devstoreaccount1.table.localhost", "devstoreaccount1-secondary.table.localhost"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots, CurrentTime: now}); err == nil {
		t.Error("the certificate is valid for example.com")
	}
}

func TestEnsureRenewsAnExpiringCertificate(t *testing.T) {
	dir := t.TempDir()
	first, _, _, err := Ensure(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	late := first.Leaf.NotAfter.Add(-renewBefore / 2)
	second, _, created, err := Ensure(dir, late)
	if err != nil || !created {
		t.Fatalf("Ensure near expiry: created=%v err=%v", created, err)
	}
	if !second.Leaf.NotAfter.After(late.Add(renewBefore)) {
		t.Fatalf("renewed certificate ends %v", second.Leaf.NotAfter)
	}
}

func TestEnsureRefusesBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	if _, _, _, err := Ensure(dir, now); err != nil {
		t.Fatal(err)
	}
	certPath := filepath.Join(dir, CertFile)
	if err := os.WriteFile(certPath, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Ensure(dir, now); err == nil || !strings.Contains(err.Error(), certPath) {
		t.Fatalf("garbage certificate: %v", err)
	}
	if got, _ := os.ReadFile(certPath); string(got) != "not a certificate" {
		t.Fatal("a broken certificate file was overwritten")
	}
	os.Remove(certPath)
	if _, _, _, err := Ensure(dir, now); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("key without certificate: %v", err)
	}
}
