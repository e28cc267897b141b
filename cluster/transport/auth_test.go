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
	signed, _ := http.NewRequest(http.MethodPost, "http://10.0.0.9:7001/cluster/members?addr=10.0.0.4%3A7001", nil)
	Sign(signed, secret, "forward", 7, 9, now)
	v := signed.Header.Get(AuthHeader)
	if !strings.HasPrefix(v, "from=7 to=9 time=1750000000 mac=") || len(v) != len("from=7 to=9 time=1750000000 mac=")+64 {
		t.Fatalf("header %q", v)
	}
	// received is the request as a server gets it: the same header, the
	// target as written on the wire.
	received := func(method, target, header string) *http.Request {
		r, _ := http.NewRequest(method, "http://10.0.0.9:7001"+target, nil)
		r.RequestURI = target
		if header != "" {
			r.Header.Set(AuthHeader, header)
		}
		return r
	}
	const target = "/cluster/members?addr=10.0.0.4%3A7001"
	from, err := Verify(received("POST", target, v), secret, "forward", 9, now.Add(MaxClockSkew))
	if err != nil || from != 7 {
		t.Fatalf("Verify = %d, %v", from, err)
	}
	if _, err := Verify(received("POST", target, v), secret, "forward", 9, now.Add(-MaxClockSkew)); err != nil {
		t.Fatalf("at -MaxClockSkew: %v", err)
	}
	tamper := func(old, new string) *http.Request {
		return received("POST", target, strings.Replace(v, old, new, 1))
	}
	for _, c := range []struct {
		name    string
		r       *http.Request
		secret  string
		purpose string
		self    uint64
		now     time.Time
		says    string
	}{
		{"wrong secret", received("POST", target, v), "other", "forward", 9, now, "not signed with this node's cluster secret"},
		{"wrong purpose", received("POST", target, v), "s3cret", "raft", 9, now, "not signed"},
		{"wrong receiver", received("POST", target, v), "s3cret", "forward", 8, now, "addressed to node 9, but this is node 8"},
		{"too late", received("POST", target, v), "s3cret", "forward", 9, now.Add(MaxClockSkew + time.Second), "away from this node's clock"},
		{"too early", received("POST", target, v), "s3cret", "forward", 9, now.Add(-MaxClockSkew - time.Second), "away from this node's clock"},
		{"another method", received("DELETE", target, v), "s3cret", "forward", 9, now, "not for this request"},
		{"another query", received("POST", "/cluster/members?addr=10.6.6.6%3A7001", v), "s3cret", "forward", 9, now, "not for this request"},
		{"another path", received("POST", "/cluster/snapshot?addr=10.0.0.4%3A7001", v), "s3cret", "forward", 9, now, "not for this request"},
		{"sender changed", tamper("from=7", "from=6"), "s3cret", "forward", 9, now, "not signed"},
		{"receiver changed", tamper("to=9", "to=8"), "s3cret", "forward", 8, now, "not signed"},
		{"time changed", tamper("time=1750000000", "time=1750000001"), "s3cret", "forward", 9, now, "not signed"},
		{"mac changed", tamper("mac=", "mac=00"), "s3cret", "forward", 9, now, "malformed"},
		{"missing", received("POST", target, ""), "s3cret", "forward", 9, now, "no Tabula-Cluster-Auth header"},
		{"garbage", received("POST", target, "from=7 to=9"), "s3cret", "forward", 9, now, "malformed"},
		{"negative", tamper("from=7", "from=-7"), "s3cret", "forward", 9, now, "malformed"},
	} {
		from, err := Verify(c.r, []byte(c.secret), c.purpose, c.self, c.now)
		if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), c.says) ||
			!strings.Contains(err.Error(), "the cluster secret or the cluster does not match") || from != 0 {
			t.Errorf("%s: Verify = %d, %v; want an error saying %q", c.name, from, err, c.says)
		}
	}
}

// TestMACInput pins the MAC's input to
// "tabula-<purpose>|from|to|time|method|target", so that another
// implementation can sign for a node.
func TestMACInput(t *testing.T) {
	// HMAC-SHA256("k", "tabula-raft|1|2|3|POST|/raft/stream"), computed
	// independently:
	// printf 'tabula-raft|1|2|3|POST|/raft/stream' | openssl dgst -sha256 -hmac k
	const want = "0503da688f96c229126f89ba91e4d085187773aceaf6f434645f001e59ba8d6c"
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:7001/raft/stream", nil)
	Sign(req, []byte("k"), "raft", 1, 2, time.Unix(3, 0))
	if got := strings.TrimPrefix(req.Header.Get(AuthHeader), "from=1 to=2 time=3 mac="); got != want {
		t.Fatalf("mac %s, want %s", got, want)
	}
}
