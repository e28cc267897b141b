package transport

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// AuthHeader is the header that authenticates a request between two nodes
// of a cluster (a raft stream, a forwarded REST request, a hello check). Its
// value is
//
//	from=<id> to=<id> time=<unix seconds> mac=<hex HMAC-SHA256>
//
// where the MAC is taken under the cluster secret over
// "tabula-<purpose>|<from>|<to>|<time>|<method>|<request target>" (decimal
// numbers; the target is the path and query as sent). The purpose is not
// carried: the receiver knows which one it expects, so a header signed for
// one use does not authenticate another, and one signed for a request
// (adding a member at one address, say) does not authenticate another.
const AuthHeader = "Tabula-Cluster-Auth"

// MaxClockSkew is how far the time in an AuthHeader may be from the
// receiver's clock, either way.
const MaxClockSkew = 5 * time.Minute

// ErrUnauthenticated is wrapped by every error Verify returns.
var ErrUnauthenticated = errors.New("the cluster secret or the cluster does not match")

// Sign adds the authentication header to req, a request from node `from`
// to node `to` whose method and URL are final; purpose distinguishes uses
// ("raft", "forward", "hello").
func Sign(req *http.Request, secret []byte, purpose string, from, to uint64, now time.Time) {
	ts := now.Unix()
	mac := authMAC(secret, purpose, from, to, ts, req.Method, target(req))
	req.Header.Set(AuthHeader, "from="+strconv.FormatUint(from, 10)+
		" to="+strconv.FormatUint(to, 10)+
		" time="+strconv.FormatInt(ts, 10)+
		" mac="+hex.EncodeToString(mac))
}

// Verify checks the header Sign added: that it was made under secret for
// purpose, that it is addressed to self and that its time is within
// MaxClockSkew of now. It returns the sender's id. Every error wraps
// ErrUnauthenticated and its text says what did not match; it is meant to
// be answered with 401 and that text.
func Verify(r *http.Request, secret []byte, purpose string, self uint64, now time.Time) (from uint64, err error) {
	v := r.Header.Get(AuthHeader)
	if v == "" {
		return 0, fmt.Errorf("no %s header: %w", AuthHeader, ErrUnauthenticated)
	}
	from, to, ts, mac, ok := parseAuth(v)
	if !ok {
		return 0, fmt.Errorf("malformed %s header: %w", AuthHeader, ErrUnauthenticated)
	}
	if !hmac.Equal(mac, authMAC(secret, purpose, from, to, ts, r.Method, target(r))) {
		return 0, fmt.Errorf("the %s request from node %d is not signed with this node's cluster secret (or not for this request): %w", purpose, from, ErrUnauthenticated)
	}
	if to != self {
		return 0, fmt.Errorf("the %s request from node %d is addressed to node %d, but this is node %d (do the nodes share the same --join list?): %w", purpose, from, to, self, ErrUnauthenticated)
	}
	skew := now.Sub(time.Unix(ts, 0))
	if skew > MaxClockSkew || skew < -MaxClockSkew {
		return 0, fmt.Errorf("the %s request from node %d was signed at %s, %s away from this node's clock (at most %s is accepted): %w",
			purpose, from, time.Unix(ts, 0).UTC().Format(time.RFC3339), skew.Abs().Round(time.Second), MaxClockSkew, ErrUnauthenticated)
	}
	return from, nil
}

// target is a request's path and query as they go on the wire: what the
// server receives as RequestURI is what the client wrote from its URL.
func target(r *http.Request) string {
	if r.RequestURI != "" {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

func authMAC(secret []byte, purpose string, from, to uint64, ts int64, method, target string) []byte {
	m := hmac.New(sha256.New, secret)
	b := make([]byte, 0, 80)
	b = append(b, "tabula-"...)
	b = append(b, purpose...)
	b = append(b, '|')
	b = strconv.AppendUint(b, from, 10)
	b = append(b, '|')
	b = strconv.AppendUint(b, to, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '|')
	b = append(b, method...)
	b = append(b, '|')
	b = append(b, target...)
	m.Write(b)
	return m.Sum(nil)
}

// parseAuth parses exactly "from=F to=T time=S mac=HEX", in that order.
func parseAuth(v string) (from, to uint64, ts int64, mac []byte, ok bool) {
	fields := strings.Split(v, " ")
	if len(fields) != 4 {
		return 0, 0, 0, nil, false
	}
	val := func(i int, key string) (string, bool) {
		s, found := strings.CutPrefix(fields[i], key+"=")
		return s, found && s != ""
	}
	var err error
	s, ok1 := val(0, "from")
	if from, err = strconv.ParseUint(s, 10, 64); !ok1 || err != nil {
		return 0, 0, 0, nil, false
	}
	s, ok1 = val(1, "to")
	if to, err = strconv.ParseUint(s, 10, 64); !ok1 || err != nil {
		return 0, 0, 0, nil, false
	}
	s, ok1 = val(2, "time")
	if ts, err = strconv.ParseInt(s, 10, 64); !ok1 || err != nil {
		return 0, 0, 0, nil, false
	}
	s, ok1 = val(3, "mac")
	if mac, err = hex.DecodeString(s); !ok1 || err != nil || len(mac) != sha256.Size {
		return 0, 0, 0, nil, false
	}
	return from, to, ts, mac, true
}
