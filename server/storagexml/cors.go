package storagexml

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Origins returns the rule's allowed origins.
func (r CorsRule) Origins() []string { return splitList(r.AllowedOrigins) }

// Methods returns the rule's allowed methods.
func (r CorsRule) Methods() []string { return splitList(r.AllowedMethods) }

// allowsAnyOrigin reports whether the rule lists "*".
func (r CorsRule) allowsAnyOrigin() bool {
	for _, o := range r.Origins() {
		if o == "*" {
			return true
		}
	}
	return false
}

// matchOrigin reports whether origin is allowed: "*", an exact match
// (ASCII case-insensitive, as scheme and host are), or a subdomain wildcard
// such as "http://*.contoso.com".
func (r CorsRule) matchOrigin(origin string) bool {
	for _, o := range r.Origins() {
		switch {
		case o == "*":
			return true
		case strings.EqualFold(o, origin):
			return true
		case origin != "":
			if prefix, suffix, ok := strings.Cut(o, "*."); ok && !strings.Contains(suffix, "*") {
				lo := strings.ToLower(origin)
				p, s := strings.ToLower(prefix), "."+strings.ToLower(suffix)
				if len(lo) > len(p)+len(s) && strings.HasPrefix(lo, p) && strings.HasSuffix(lo, s) {
					if middle := lo[len(p) : len(lo)-len(s)]; !strings.ContainsAny(middle, "/:") {
						return true
					}
				}
			}
		}
	}
	return false
}

func (r CorsRule) matchMethod(method string) bool {
	for _, m := range r.Methods() {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}

// matchHeader reports whether a header name matches a rule list entry: the
// same name, or a prefix entry ending in '*' (x-ms-meta* matches
// x-ms-meta-abc). Names compare case-insensitively.
func matchHeader(entry, name string) bool {
	if p, ok := strings.CutSuffix(entry, "*"); ok {
		return len(name) >= len(p) && strings.EqualFold(name[:len(p)], p)
	}
	return strings.EqualFold(entry, name)
}

// selectRule returns the first rule whose origins and methods allow the
// request: the service evaluates rules in order and the first such rule
// decides (cross-origin-resource-sharing--cors--support, evaluation logic).
func selectRule(rules []CorsRule, origin, method string) (CorsRule, bool) {
	for _, r := range rules {
		if r.matchOrigin(origin) && r.matchMethod(method) {
			return r, true
		}
	}
	return CorsRule{}, false
}

// Preflight answers an OPTIONS request (Preflight Table Request), which
// needs no authorization. It returns the headers of the 200 response, or a
// *Error: 400 InvalidHeaderValue without Origin or
// Access-Control-Request-Method, 403 CorsPreflightFailure when CORS is off,
// no rule allows the origin and method, or the selected rule does not allow
// every requested header (the first matching rule decides; later rules are
// not consulted).
func Preflight(rules []CorsRule, origin, method, requestHeaders string) (http.Header, error) {
	if origin == "" || method == "" {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalidHeaderValue, Message: "A required CORS header is not present.",
			Detail: "a preflight request needs Origin and Access-Control-Request-Method"}
	}
	fail := func(detail string) error {
		return &Error{Status: http.StatusForbidden, Code: CodeCorsPreflightFailure,
			Message: "CORS not enabled or no matching rule found for this request.", Detail: detail}
	}
	if len(rules) == 0 {
		return nil, fail("CORS is not enabled for the table service")
	}
	r, ok := selectRule(rules, origin, method)
	if !ok {
		return nil, fail("no CORS rule allows this origin and method")
	}
	var requested []string
	for _, h := range splitList(requestHeaders) {
		if h == "" {
			continue
		}
		allowed := false
		for _, entry := range splitList(r.AllowedHeaders) {
			if matchHeader(entry, h) {
				allowed = true
				break
			}
		}
		if !allowed {
			return nil, fail("the CORS rule does not allow the header " + strconv.Quote(truncate(h, 64)))
		}
		requested = append(requested, strings.ToLower(h))
	}
	out := http.Header{}
	if r.allowsAnyOrigin() {
		out.Set("Access-Control-Allow-Origin", "*")
	} else {
		out.Set("Access-Control-Allow-Origin", origin)
		out.Set("Access-Control-Allow-Credentials", "true")
	}
	out.Set("Access-Control-Allow-Methods", method)
	if len(requested) > 0 {
		sort.Strings(requested)
		out.Set("Access-Control-Allow-Headers", strings.Join(requested, ","))
	}
	out.Set("Access-Control-Max-Age", strconv.Itoa(r.MaxAgeInSeconds))
	return out, nil
}

// ActualHeaders returns the CORS headers to add to the response of an
// ordinary (non-OPTIONS) request with the given Origin (possibly empty) and
// method; response holds the headers the response already has, which
// prefix entries of ExposedHeaders are matched against. It follows the
// service's table for GET/HEAD: with a matching rule that allows every
// origin, Access-Control-Allow-Origin: * and the exposed headers; with a
// rule matching the exact origin, that origin, the exposed headers,
// Access-Control-Allow-Credentials: true and Vary: Origin; with CORS on but
// no matching rule, only Vary: Origin. Other methods never get Vary (their
// responses are not cached), and requests without Origin get nothing
// unless they are GET/HEAD.
func ActualHeaders(rules []CorsRule, origin, method string, response http.Header) http.Header {
	out := http.Header{}
	if len(rules) == 0 {
		return out
	}
	cacheable := method == http.MethodGet || method == http.MethodHead
	if origin == "" && !cacheable {
		return out
	}
	r, ok := selectRule(rules, origin, method)
	if !ok {
		if cacheable {
			out.Set("Vary", "Origin")
		}
		return out
	}
	if exposed := exposedHeaders(r, response); exposed != "" {
		out.Set("Access-Control-Expose-Headers", exposed)
	}
	if r.allowsAnyOrigin() {
		out.Set("Access-Control-Allow-Origin", "*")
		return out
	}
	out.Set("Access-Control-Allow-Origin", origin)
	out.Set("Access-Control-Allow-Credentials", "true")
	if cacheable {
		out.Set("Vary", "Origin")
	}
	return out
}

// exposedHeaders lists the response's header names that a prefix entry
// matches, then the literal entries (as the emulator does), lower case,
// without duplicates.
func exposedHeaders(r CorsRule, response http.Header) string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		n = strings.ToLower(n)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	entries := splitList(r.ExposedHeaders)
	var present []string
	for name := range response {
		present = append(present, name)
	}
	sort.Strings(present)
	for _, name := range present {
		for _, e := range entries {
			if strings.HasSuffix(e, "*") && matchHeader(e, name) {
				add(name)
				break
			}
		}
	}
	for _, e := range entries {
		if e != "" && !strings.HasSuffix(e, "*") {
			add(e)
		}
	}
	return strings.Join(names, ",")
}
