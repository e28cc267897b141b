package auth

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

const tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"

// token encodes claims as a JWT (header.payload.signature), with the
// usual claims of an Entra ID storage token unless claims overrides them;
// a nil value removes a claim.
func token(claims map[string]any) string {
	now := refTime.Unix()
	c := map[string]any{"aud": "https://storage.azure.com", "iss": "https://sts.windows.net/" + tenant + "/",
		"tid": tenant, "iat": now - 60, "nbf": now - 60, "exp": now + 3600}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(c) + ".c2lnbmF0dXJl"
}

func bearerReq(tok string, overTLS bool) *http.Request {
	r := newReq("GET", "/devstoreaccount1/Tables", map[string]string{"Authorization": "Bearer " + tok})
	if overTLS {
		r.TLS = &tls.ConnectionState{}
	}
	return r
}

func TestBearerAccepted(t *testing.T) {
	a := testAccounts(t)
	for name, claims := range map[string]map[string]any{
		"storage audience":           nil,
		"storage audience, slash":    {"aud": "https://storage.azure.com/"},
		"storage application id":     {"aud": "e406a681-f3d4-42a8-90b6-c2b029497af1"},
		"the account's table URL":    {"aud": "https://devstoreaccount1.table.core.windows.net"},
		"audience list":              {"aud": []string{"https://example.com", "https://storage.azure.com"}},
		"v2 issuer":                  {"iss": "https://login.microsoftonline.com/" + tenant + "/v2.0"},
		"expired within clock skew":  {"exp": refTime.Add(-4 * time.Minute).Unix()},
		"not yet valid within skew":  {"nbf": refTime.Add(4 * time.Minute).Unix()},
		"national cloud issuer":      {"iss": "https://sts.chinacloudapi.cn/" + tenant + "/"},
		"national cloud account URL": {"aud": "https://devstoreaccount1.table.core.chinacloudapi.cn/"},
	} {
		p, err := a.AuthenticateBearer(bearerReq(token(claims), true), DevAccountName, refTime)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.Kind != KindBearer || p.Account != DevAccountName {
			t.Errorf("%s: principal %v", name, p)
		}
		if err := p.CanDo(OpInsertEntity, "t"); err != nil {
			t.Errorf("%s: insert refused: %v", name, err)
		}
		wantCode(t, p.CanDo(OpGetTableACL, "t"), http.StatusNotFound, "ResourceNotFound")
		wantCode(t, p.CanDo(OpSetTableACL, "t"), http.StatusNotFound, "ResourceNotFound")
	}
}

func TestBearerRefused(t *testing.T) {
	a := testAccounts(t)
	for _, c := range []struct {
		name   string
		token  string
		detail string
	}{
		{"expired", token(map[string]any{"exp": refTime.Add(-6 * time.Minute).Unix()}), "expired"},
		{"not yet valid", token(map[string]any{"nbf": refTime.Add(6 * time.Minute).Unix()}), "not yet valid"},
		{"no exp", token(map[string]any{"exp": nil}), "no nbf, exp or iat"},
		{"no iat", token(map[string]any{"iat": nil}), "no nbf, exp or iat"},
		{"another service's audience", token(map[string]any{"aud": "https://vault.azure.net"}), "Audience"},
		{"another account's table URL", token(map[string]any{"aud": "https://other.table.core.windows.net"}), "Audience"},
		{"a blob endpoint", token(map[string]any{"aud": "https://devstoreaccount1.blob.core.windows.net"}), "Audience"},
		{"audience with a suffix", token(map[string]any{"aud": "https://storage.azure.com.evil.example"}), "Audience"},
		{"no audience", token(map[string]any{"aud": nil}), "Audience"},
		{"foreign issuer", token(map[string]any{"iss": "https://accounts.example.com/" + tenant + "/"}), "Issuer"},
		{"issuer prefix without tenant", token(map[string]any{"iss": "https://sts.windows.net/"}), "Issuer"},
		{"issuer look-alike host", token(map[string]any{"iss": "https://sts.windows.net.evil.example/x/"}), "Issuer"},
		{"two segments", "eyJhbGciOiJub25lIn0.e30", "not a JWT"},
		{"not base64", "a.b!c.d", "not a JWT"},
		{"claims not an object", base64.RawURLEncoding.EncodeToString([]byte(`{}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`[1]`)) + ".x", "not a JWT"},
		{"exp not a number", token(map[string]any{"exp": "tomorrow"}), "malformed"},
		{"huge", strings.Repeat("a", 20<<10), "too large"},
	} {
		_, err := a.AuthenticateBearer(bearerReq(c.token, true), DevAccountName, refTime)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want a refusal", c.name, err)
			continue
		}
		if e.Status != http.StatusUnauthorized || e.Code != CodeInvalidAuthenticationInfo || !strings.Contains(e.Detail, c.detail) {
			t.Errorf("%s: %d %s %q; want 401 %s and a detail with %q", c.name, e.Status, e.Code, e.Detail, CodeInvalidAuthenticationInfo, c.detail)
		}
		if !strings.HasPrefix(e.Challenge, "Bearer authorization_uri=https://login.microsoftonline.com/") ||
			!strings.HasSuffix(e.Challenge, "/oauth2/authorize resource_id=https://storage.azure.com") {
			t.Errorf("%s: challenge %q", c.name, e.Challenge)
		}
	}

	// The challenge names the token's tenant, unless it is not a tenant's
	// shape (it goes into a response header).
	_, err := a.AuthenticateBearer(bearerReq(token(map[string]any{"exp": int64(0)}), true), DevAccountName, refTime)
	if e := (*Error)(nil); !errors.As(err, &e) || !strings.Contains(e.Challenge, "/"+tenant+"/oauth2") {
		t.Errorf("challenge for the token's tenant: %v", err)
	}
	_, err = a.AuthenticateBearer(bearerReq(token(map[string]any{"exp": int64(0), "tid": "x\r\nSet-Cookie: a"}), true), DevAccountName, refTime)
	if e := (*Error)(nil); !errors.As(err, &e) || !strings.Contains(e.Challenge, "/common/oauth2") {
		t.Errorf("challenge for a hostile tid: %v", err)
	}

	// Over plain HTTP a token is never looked at.
	_, err = a.AuthenticateBearer(bearerReq(token(nil), false), DevAccountName, refTime)
	wantCode(t, err, http.StatusForbidden, CodeAuthenticationFailed)
	// An unknown account.
	_, err = a.AuthenticateBearer(bearerReq(token(nil), true), "nosuch", refTime)
	wantCode(t, err, http.StatusBadRequest, CodeInvalidOperation)
}
