package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Test keys: the development key, a second key for the same account, and a
// key of another account.
const (
	devKey   = DevAccountKey
	devKey2  = "a2V5MmtleTJrZXkya2V5MmtleTJrZXkya2V5MmtleTI="
	otherKey = "b3RoZXJvdGhlcm90aGVyb3RoZXJvdGhlcm90aGVyMTI="
)

func testAccounts(t *testing.T) *Accounts {
	t.Helper()
	a, err := ParseAccounts(DevAccountName + ":" + devKey + ":" + devKey2 + ";other:" + otherKey)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mac signs independently of the package: base64(HMAC-SHA256(key, s)).
func mac(t *testing.T, b64key, s string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(b64key)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// newReq builds a server-side request as net/http would hand it over
// (RequestURI set, RemoteAddr 192.0.2.10).
func newReq(method, target string, hdr map[string]string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "192.0.2.10:51000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	return r
}

// wantCode checks that err is an *Error with the given status and code.
func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error; want %d %s", err, err, status, code)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("got %d %s (%s), want %d %s", e.Status, e.Code, e.Detail, status, code)
	}
}

var refTime = time.Date(2024, 3, 26, 8, 12, 52, 0, time.UTC)
