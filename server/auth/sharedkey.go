package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxClockSkew is how far a Shared Key request's date may be from the
// server's clock, in either direction, before the request is refused as
// stale (authorize-with-shared-key: "older than 15 minutes").
const MaxClockSkew = 15 * time.Minute

// secondarySuffix marks the read-access secondary endpoint in path-style
// URLs (/devstoreaccount1-secondary/...). Clients sign the primary name.
const secondarySuffix = "-secondary"

// sign computes base64(HMAC-SHA256(key, stringToSign)), the signature every
// scheme here uses.
func sign(key []byte, stringToSign string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(stringToSign))
	return h.Sum(nil)
}

// SignString returns base64(HMAC-SHA256(key, stringToSign)) for a base64
// account key. Tests and tools use it to build requests the way SDKs do.
func SignString(base64Key, stringToSign string) (string, error) {
	key, err := base64.StdEncoding.DecodeString(base64Key)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sign(key, stringToSign)), nil
}

// matchesAnyKey reports whether sig is the MAC of any of the account's keys
// over one of the strings to sign. Every comparison is constant-time, so
// the time taken tells nothing of how close a forged signature came. It
// stops at the first match: which key and which form matched is no
// secret (the client chose both), and the common case then costs one MAC.
func (a *account) matchesAnyKey(sig []byte, stringsToSign ...string) bool {
	var sum [sha256.Size]byte
	for _, pool := range a.macs {
		mac := pool.Get().(hash.Hash)
		for _, s := range stringsToSign {
			mac.Reset()
			io.WriteString(mac, s)
			if hmac.Equal(sig, mac.Sum(sum[:0])) {
				pool.Put(mac)
				return true
			}
		}
		pool.Put(mac)
	}
	return false
}

// requestPath returns the request's path exactly as the client sent it
// (still percent-encoded): the SDKs sign the encoded form
// (aztables: URL.EscapedPath(); @azure/data-tables: URL.pathname), and
// re-encoding a decoded path would not always give the same bytes back.
func requestPath(r *http.Request) string {
	uri := r.RequestURI
	if uri == "" {
		return r.URL.EscapedPath()
	}
	if uri == "*" {
		return "/"
	}
	if !strings.HasPrefix(uri, "/") {
		// Absolute form (proxy style): drop scheme and authority.
		if i := strings.Index(uri, "://"); i >= 0 {
			rest := uri[i+3:]
			if j := strings.IndexAny(rest, "/?#"); j >= 0 {
				uri = rest[j:]
			} else {
				uri = "/"
			}
		}
	}
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	if uri == "" {
		uri = "/"
	}
	return uri
}

// compParam returns the decoded value of the comp query parameter, the only
// parameter the Table service's canonicalized resource keeps. The name is
// matched exactly, as the SDKs sign it and the router reads it.
func compParam(r *http.Request) (string, bool) {
	if !strings.Contains(r.URL.RawQuery, "comp=") {
		return "", false
	}
	q, _ := url.ParseQuery(r.URL.RawQuery) // best effort: a bad escape elsewhere must not hide comp
	if v, ok := q["comp"]; ok && len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// canonicalizedResources returns the CanonicalizedResource strings a
// correctly signed request to account may have used, best first. Every
// form is "/" + account + a path + ["?comp=" + comp]; the paths are:
//
//  1. the path as sent. It is what aztables, @azure/data-tables and
//     Azure.Data.Tables sign, for both URL styles. For path-style URLs the
//     path starts with the account again, so the account appears twice
//     (/devstoreaccount1/devstoreaccount1/mytable), and on the secondary
//     endpoint the path keeps its "-secondary" suffix.
//  2. path-style on the secondary only: the path with the suffix dropped
//     from its first segment, as the emulator computes it.
//  3. path-style only: the path without its account segment
//     (/devstoreaccount1/mytable), the resource a production URL would
//     name, which hand-written clients sign.
//
// Each names the resource the request addresses, so accepting it lets
// nothing through that form 1 would not.
func canonicalizedResources(r *http.Request, account string, hostStyle bool) []string {
	path := requestPath(r)
	prefix := "/" + account
	comp := ""
	if v, ok := compParam(r); ok {
		comp = "?comp=" + v
	}
	out := []string{prefix + path + comp}
	if hostStyle {
		return out
	}
	if rest, ok := cutSegment(path, prefix+secondarySuffix); ok {
		path = prefix + rest
		out = append(out, prefix+path+comp)
	}
	if rest, ok := cutSegment(path, prefix); ok {
		if rest == "" {
			rest = "/"
		}
		out = append(out, prefix+rest+comp)
	}
	return out
}

// cutSegment cuts a whole leading path segment off path.
func cutSegment(path, segment string) (rest string, ok bool) {
	rest, ok = strings.CutPrefix(path, segment)
	return rest, ok && (rest == "" || rest[0] == '/')
}

// stringToSign returns the string to sign of a Table Shared Key request
// (authorize-with-shared-key, "Table service (Shared Key authorization)"),
// with no canonicalized x-ms-* headers, unlike Blob and Queue:
//
//	VERB + "\n" + Content-MD5 + "\n" + Content-Type + "\n" + Date + "\n" + CanonicalizedResource
//
// or of Table Shared Key Lite, the scheme the current SDKs (aztables,
// @azure/data-tables, Azure.Data.Tables, azure-data-tables) all use:
//
//	Date + "\n" + CanonicalizedResource
func stringToSign(kind Kind, r *http.Request, date, resource string) string {
	if kind == KindSharedKeyLite {
		return date + "\n" + resource
	}
	return strings.ToUpper(r.Method) + "\n" + r.Header.Get("Content-Md5") + "\n" + r.Header.Get("Content-Type") + "\n" + date + "\n" + resource
}

// checkDate refuses a request date that does not parse or lies more than
// MaxClockSkew from now.
func checkDate(name, value string, now time.Time) *Error {
	t, err := http.ParseTime(value)
	if err != nil {
		return authFailed("The " + name + " header is not a valid RFC 1123 date.")
	}
	if d := now.Sub(t); d > MaxClockSkew {
		return authFailed("Request date header too old: '" + value + "'")
	} else if d < -MaxClockSkew {
		return authFailed("Request date header is too far in the future: '" + value + "'")
	}
	return nil
}

// verifySharedKey checks an Authorization: SharedKey / SharedKeyLite header.
func verifySharedKey(r *http.Request, acct *account, hostStyle bool, header string, now time.Time) (Kind, *Error) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok {
		return 0, authFailed("The Authorization header is not of the form '<scheme> <account>:<signature>'.")
	}
	var kind Kind
	switch {
	case strings.EqualFold(scheme, "SharedKey"):
		kind = KindSharedKey
	case strings.EqualFold(scheme, "SharedKeyLite"):
		kind = KindSharedKeyLite
	default:
		return 0, authFailed("The authorization scheme '" + truncate(scheme, 32) + "' is not supported; use SharedKey, SharedKeyLite or a shared access signature.")
	}
	name, sigText, ok := strings.Cut(strings.TrimSpace(cred), ":")
	if !ok || name == "" || sigText == "" {
		return 0, authFailed("The Authorization header is not of the form '<scheme> <account>:<signature>'.")
	}
	if name != acct.name {
		return 0, authFailed("The account in the Authorization header is not the account the request addresses.")
	}
	sig, err := base64.StdEncoding.DecodeString(sigText)
	if err != nil || len(sig) != sha256.Size {
		return 0, authFailed("The signature in the Authorization header is not a base64 HMAC-SHA256.")
	}

	// Date: x-ms-date wins over Date (authorize-with-shared-key). Azurite and
	// older SDKs put the Date header's value in the string to sign when both
	// are present, so that value is tried too; whichever value was signed must
	// itself be fresh.
	xmsDate, date := r.Header.Get("X-Ms-Date"), r.Header.Get("Date")
	var dates []string
	switch {
	case xmsDate != "":
		if e := checkDate("x-ms-date", xmsDate, now); e != nil {
			return 0, e
		}
		dates = append(dates, xmsDate)
		if date != "" && date != xmsDate && checkDate("Date", date, now) == nil {
			dates = append(dates, date)
		}
	case date != "":
		if e := checkDate("Date", date, now); e != nil {
			return 0, e
		}
		dates = append(dates, date)
	default:
		return 0, authFailed("The request has neither an x-ms-date nor a Date header.")
	}

	resources := canonicalizedResources(r, acct.name, hostStyle)
	// The SDKs sign the first date and the first resource form: try that
	// string alone before building the others.
	first := stringToSign(kind, r, dates[0], resources[0])
	if acct.matchesAnyKey(sig, first) {
		return kind, nil
	}
	candidates := []string{first}
	for _, d := range dates {
		for _, res := range resources {
			if d != dates[0] || res != resources[0] {
				candidates = append(candidates, stringToSign(kind, r, d, res))
			}
		}
	}
	if !acct.matchesAnyKey(sig, candidates[1:]...) {
		return 0, authFailed("The MAC signature found in the HTTP request is not the same as any computed signature. Server used following string to sign: '" + candidates[0] + "'.")
	}
	return kind, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
