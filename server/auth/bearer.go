package auth

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Bearer tokens (Microsoft Entra ID, OAuth 2.0) are checked as the
// emulator checks them with --oauth basic: the token must be a JWT whose
// audience is the storage service or this account's table endpoint, whose
// issuer is a Microsoft token service, and whose lifetime includes now.
// The signature is not verified, as no Entra ID tenant is reachable from
// a development machine: this authenticates nobody, it lets code written
// for Entra ID run unchanged against a local store.

// bearerClockSkew is the leeway given to a token's nbf and exp, the
// default of Microsoft's own token validation.
const bearerClockSkew = 5 * time.Minute

// maxBearerToken bounds the token decoded; Entra ID tokens are a few KiB.
const maxBearerToken = 16 << 10

// tokenIssuerPrefixes are the token services whose issuer names are
// accepted: Entra ID's v1 (sts.*) and v2 (login.*) endpoints in the
// public and national clouds, and the test cloud the emulator also takes.
var tokenIssuerPrefixes = []string{
	"https://sts.windows.net/",
	"https://sts.microsoftonline.de/",
	"https://sts.chinacloudapi.cn/",
	"https://sts.windows-ppe.net/",
	"https://login.microsoftonline.com/",
	"https://login.microsoftonline.us/",
	"https://login.chinacloudapi.cn/",
}

// tableAudience matches the audiences the Table service accepts: the
// storage resource itself, its application id, and an account's table
// endpoint in any cloud (the account named must be the one addressed).
var tableAudience = regexp.MustCompile(`^(?:https://storage\.azure\.(?:com|us|cn)/?` +
	`|e406a681-f3d4-42a8-90b6-c2b029497af1` +
	`|https://([a-z0-9]+)\.table\.core\.(?:windows\.net|chinacloudapi\.cn|usgovcloudapi\.net|cloudapi\.de)/?)$`)

// tokenClaims are the claims of an access token that are checked.
type tokenClaims struct {
	Audience  audience `json:"aud"`
	Issuer    string   `json:"iss"`
	Tenant    string   `json:"tid"`
	NotBefore *int64   `json:"nbf"`
	Expiry    *int64   `json:"exp"`
	IssuedAt  *int64   `json:"iat"`
}

// audience is the aud claim: one string, or (RFC 7519 §4.1.3) several.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// IsBearer reports whether r carries an Authorization header of the
// Bearer scheme.
func IsBearer(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	return len(h) > 7 && strings.EqualFold(h[:7], "Bearer ")
}

// AuthenticateBearer checks a request's Authorization: Bearer token for
// account as of now. It must have come over TLS. A refusal is an *Error:
// 401 InvalidAuthenticationInfo with the service's WWW-Authenticate
// challenge for a token that is malformed, expired, not yet valid, or for
// another audience or issuer; 403 AuthenticationFailed over plain HTTP.
func (a *Accounts) AuthenticateBearer(r *http.Request, account string, now time.Time) (*Principal, error) {
	acct, err := a.account(account)
	if err != nil {
		return nil, err
	}
	if r.TLS == nil {
		return nil, authFailed("Authentication scheme Bearer is not allowed with HTTP.")
	}
	if h := r.Header.Values("Authorization"); len(h) != 1 {
		return nil, invalidToken("", "The request has more than one Authorization header.")
	}
	token := strings.TrimSpace(r.Header.Get("Authorization")[7:])
	c, detail := parseToken(token)
	if detail != "" {
		return nil, invalidToken(c.Tenant, detail)
	}
	if detail := c.check(acct.name, now); detail != "" {
		return nil, invalidToken(c.Tenant, detail)
	}
	return &Principal{Account: acct.name, Kind: KindBearer}, nil
}

// parseToken decodes a JWT's claims without verifying its signature. The
// detail is empty when the token is well formed.
func parseToken(token string) (tokenClaims, string) {
	var c tokenClaims
	if len(token) > maxBearerToken {
		return c, "The token is too large."
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, "The token is not a JWT (header.payload.signature)."
	}
	for _, p := range parts[:2] {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(p, "="))
		if err != nil {
			return c, "The token is not a JWT: a segment is not base64url."
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return c, "The token is not a JWT: a segment is not a JSON object."
		}
		if p == parts[1] {
			if err := json.Unmarshal(raw, &c); err != nil {
				return c, "The token's claims are malformed."
			}
		}
	}
	return c, ""
}

// check applies the emulator's checks to a token's claims for account.
func (c *tokenClaims) check(account string, now time.Time) string {
	if c.NotBefore == nil || c.Expiry == nil || c.IssuedAt == nil {
		return "The token has no nbf, exp or iat claim."
	}
	if now.Add(bearerClockSkew).Before(time.Unix(*c.NotBefore, 0)) {
		return "Lifetime validation failed. The token is not yet valid."
	}
	if now.Add(-bearerClockSkew).After(time.Unix(*c.Expiry, 0)) {
		return "Lifetime validation failed. The token is expired."
	}
	issuerOK := false
	for _, p := range tokenIssuerPrefixes {
		if rest, ok := strings.CutPrefix(c.Issuer, p); ok && strings.Trim(rest, "/") != "" {
			issuerOK = true
			break
		}
	}
	if !issuerOK {
		return "Issuer validation failed. Issuer did not match."
	}
	for _, aud := range c.Audience {
		if m := tableAudience.FindStringSubmatch(aud); m != nil && (m[1] == "" || m[1] == account) {
			return ""
		}
	}
	return "Audience validation failed. Audience did not match."
}

// invalidToken is the service's answer to a bearer token it does not
// accept: 401 with a challenge naming where to get a token and for what.
func invalidToken(tenant, detail string) *Error {
	if tenant == "" || !validTenant(tenant) {
		tenant = "common"
	}
	return &Error{
		Status: http.StatusUnauthorized, Code: CodeInvalidAuthenticationInfo,
		Message:   "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.",
		Detail:    detail,
		Challenge: "Bearer authorization_uri=https://login.microsoftonline.com/" + tenant + "/oauth2/authorize resource_id=https://storage.azure.com",
	}
}

// validTenant keeps a client's tid claim out of a response header unless
// it looks like a tenant id or domain.
func validTenant(t string) bool {
	if len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
