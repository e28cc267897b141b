// Package devcert makes and keeps the self-signed certificate that
// `tabula serve --https` uses, so local HTTPS needs no set-up: the first
// start writes a certificate and key into the data directory, later
// starts reuse them, and the user trusts the one certificate file.
package devcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside the directory.
const (
	CertFile = "tabula-cert.pem"
	KeyFile  = "tabula-key.pem"
)

// Hosts are the names the certificate is valid for: the loopback
// addresses, localhost, and the production-style account hosts under
// table.localhost (devstoreaccount1.table.localhost and its secondary).
var Hosts = []string{"127.0.0.1", "::1", "localhost", "*.table.localhost"}

// validity is a new certificate's lifetime; renewBefore is how long
// before its end a certificate is replaced at start.
const (
	validity    = 825 * 24 * time.Hour // the longest lifetime macOS and browsers take for a server certificate
	renewBefore = 30 * 24 * time.Hour
)

// Ensure returns the certificate in dir, creating it (and replacing one
// that has expired or will within 30 days) as of now. created says
// whether it was written now, so the caller can tell the user to trust
// it. A certificate or key file that exists but does not load is an
// error naming the file, never silently overwritten.
func Ensure(dir string, now time.Time) (cert tls.Certificate, certPath string, created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	cert, err = tls.LoadX509KeyPair(certPath, keyPath)
	switch {
	case err == nil:
		if now.Add(renewBefore).Before(cert.Leaf.NotAfter) {
			return cert, certPath, false, nil
		}
	case errors.Is(err, fs.ErrNotExist):
		// Neither file may be left over alone: a key without its
		// certificate (or the reverse) is a broken directory, not a first
		// start.
		if exists(certPath) || exists(keyPath) {
			return tls.Certificate{}, "", false, fmt.Errorf("devcert: %s or %s is missing while the other exists; remove both to have a new certificate made", certPath, keyPath)
		}
	default:
		return tls.Certificate{}, "", false, fmt.Errorf("devcert: %s and %s do not load as a certificate and its key: %w", certPath, keyPath, err)
	}
	certPEM, keyPEM, err := Generate(now)
	if err != nil {
		return tls.Certificate{}, "", false, err
	}
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, "", false, err
	}
	if err := writeFile(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, "", false, err
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, "", false, fmt.Errorf("devcert: the new certificate does not load: %w", err)
	}
	return cert, certPath, true, nil
}

// Generate returns a new self-signed certificate for Hosts, valid from
// an hour before now, and its ECDSA P-256 key, both PEM-encoded.
func Generate(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("devcert: generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("devcert: generating a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Tabula development"}, CommonName: "Tabula local HTTPS"},
		NotBefore:    now.Add(-time.Hour), // tolerate a client clock a little behind
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// A self-signed certificate the user adds to a trust store acts as
		// its own root; marking it a CA (that may sign nothing below it)
		// lets the stricter verifiers accept it as one.
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	for _, h := range Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("devcert: creating the certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("devcert: encoding the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// writeFile writes data to path through a temporary file and a rename, so
// a crash leaves the old file or the new one, never half of either.
func writeFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("devcert: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("devcert: writing %s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
