package transport

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	now := time.Unix(1_750_000_000, 0)
	secret := []byte("s3cret")
	h := http.Header{}
	Sign(h, secret, "forward", 7, 9, now)
	if v := h.Get(AuthHeader); !strings.HasPrefix(v, "from=7 to=9 time=1750000000 mac=") || len(v) != len("from=7 to=9 time=1750000000 mac=")+64 {
		t.Fatalf("header %q", v)
	}
	from, err := Verify(h, secret, "forward", 9, now.Add(MaxClockSkew))
	if err != nil || from != 7 {
		t.Fatalf("Verify = %d, %v", from, err)
	}
	if _, err := Verify(h, secret, "forward", 9, now.Add(-MaxClockSkew)); err != nil {
		t.Fatalf("at -MaxClockSkew: %v", err)
	}
	tamper := func(old, new string) http.Header {
		return http.Header{AuthHeader: {strings.Replace(h.Get(AuthHeader), old, new, 1)}}
	}
	for _, c := range []struct {
		name    string
		h       http.Header
		secret  string
		purpose string
		self    uint64
		now     time.Time
		says    string
	}{
		{"wrong secret", h, "other", "forward", 9, now, "not signed with this node's cluster secret"},
		{"wrong purpose", h, "s3cret", "raft", 9, now, "not signed"},
		{"wrong receiver", h, "s3cret", "forward", 8, now, "addressed to node 9, but this is node 8"},
		{"too late", h, "s3cret", "forward", 9, now.Add(MaxClockSkew + time.Second), "away from this node's clock"},
		{"too early", h, "s3cret", "forward", 9, now.Add(-MaxClockSkew - time.Second), "away from this node's clock"},
		{"sender changed", tamper("from=7", "from=6"), "s3cret", "forward", 9, now, "not signed"},
		{"receiver changed", tamper("to=9", "to=8"), "s3cret", "forward", 8, now, "not signed"},
		{"time changed", tamper("time=1750000000", "time=1750000001"), "s3cret", "forward", 9, now, "not signed"},
		{"mac changed", tamper("mac=", "mac=00"), "s3cret", "forward", 9, now, "malformed"},
		{"missing", http.Header{}, "s3cret", "forward", 9, now, "no Tabula-Cluster-Auth header"},
		{"garbage", http.Header{AuthHeader: {"from=7 to=9"}}, "s3cret", "forward", 9, now, "malformed"},
		{"negative", tamper("from=7", "from=-7"), "s3cret", "forward", 9, now, "malformed"},
	} {
		from, err := Verify(c.h, []byte(c.secret), c.purpose, c.self, c.now)
		if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), c.says) ||
			!strings.Contains(err.Error(), "the cluster secret or the cluster does not match") || from != 0 {
			t.Errorf("%s: Verify = %d, %v; want an error saying %q", c.name, from, err, c.says)
		}
	}
}

// TestMACInput pins the MAC's input to "tabula-<purpose>|from|to|time", so
// that another implementation can sign for a node.
func TestMACInput(t *testing.T) {
	// HMAC-SHA256("k", "tabula-raft|1|2|3"), computed independently:
	// printf 'tabula-raft|1|2|3' | openssl dgst -sha256 -hmac k
	const want = "74febb5c7a59ffab1c4408d5e9077bdc42ee72eb5c3f160d0722075a33aa9f54"
	h := http.Header{}
	Sign(h, []byte("k"), "raft", 1, 2, time.Unix(3, 0))
	if got := strings.TrimPrefix(h.Get(AuthHeader), "from=1 to=2 time=3 mac="); got != want {
		t.Fatalf("mac %s, want %s", got, want)
	}
}
