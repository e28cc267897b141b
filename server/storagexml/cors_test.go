package storagexml

import (
	"net/http"
	"reflect"
	"testing"
)

// evalRules are the rules of the CORS page's evaluation example.
var evalRules = []CorsRule{
	{AllowedOrigins: "http://www.contoso.com", AllowedMethods: "PUT,HEAD", MaxAgeInSeconds: 5, ExposedHeaders: "x-ms-*",
		AllowedHeaders: "x-ms-blob-content-type, x-ms-blob-content-disposition"},
	{AllowedOrigins: "*", AllowedMethods: "PUT,GET", MaxAgeInSeconds: 5, ExposedHeaders: "x-ms-*",
		AllowedHeaders: "x-ms-blob-content-type, x-ms-blob-content-disposition"},
	{AllowedOrigins: "http://www.contoso.com", AllowedMethods: "GET", MaxAgeInSeconds: 5, ExposedHeaders: "x-ms-*",
		AllowedHeaders: "x-ms-client-request-id"},
}

// TestPreflightDocExample replays the evaluation table of the CORS page:
// the first rule matching origin and method decides, even when a later rule
// would allow the headers.
func TestPreflightDocExample(t *testing.T) {
	h, err := Preflight(evalRules, "http://www.contoso.com", "PUT", "x-ms-blob-content-type")
	if err != nil || h.Get("Access-Control-Allow-Origin") != "http://www.contoso.com" || h.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("first rule: %v %v", h, err)
	}
	h, err = Preflight(evalRules, "http://www.contoso.com", "GET", "x-ms-blob-content-type")
	if err != nil || h.Get("Access-Control-Allow-Origin") != "*" || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("second rule: %v %v", h, err)
	}
	_, err = Preflight(evalRules, "http://www.contoso.com", "GET", "x-ms-client-request-id")
	if ErrorCode(err) != CodeCorsPreflightFailure {
		t.Fatalf("third request: %v", err)
	}
}

func TestPreflightResponse(t *testing.T) {
	// The preflight-table-request sample: a wildcard rule, headers
	// "content-type, accept" answered as "accept,content-type".
	rules := []CorsRule{{AllowedOrigins: "*", AllowedMethods: "PUT", AllowedHeaders: "content-type,accept", MaxAgeInSeconds: 60}}
	h, err := Preflight(rules, "www.contoso.com", "PUT", "content-type, accept")
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"Access-Control-Allow-Origin":  {"*"},
		"Access-Control-Max-Age":       {"60"},
		"Access-Control-Allow-Methods": {"PUT"},
		"Access-Control-Allow-Headers": {"accept,content-type"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got %v\nwant %v", h, want)
	}
	h, err = Preflight([]CorsRule{{AllowedOrigins: "http://a.test", AllowedMethods: "GET", AllowedHeaders: "x-ms-meta*", MaxAgeInSeconds: 9}},
		"http://A.test", "get", "X-Ms-Meta-Abc,x-ms-meta")
	if err != nil || h.Get("Access-Control-Allow-Headers") != "x-ms-meta,x-ms-meta-abc" || h.Get("Access-Control-Allow-Origin") != "http://A.test" {
		t.Fatalf("%v %v", h, err)
	}
}

func TestPreflightRefusals(t *testing.T) {
	rules := []CorsRule{{AllowedOrigins: "http://a.test,http://*.b.test", AllowedMethods: "GET,PUT", AllowedHeaders: "x-ms-meta*,x-ms-version", MaxAgeInSeconds: 1}}
	for _, c := range []struct {
		name                   string
		rules                  []CorsRule
		origin, method, header string
		code                   string
	}{
		{"no origin", rules, "", "GET", "", CodeInvalidHeaderValue},
		{"no method", rules, "http://a.test", "", "", CodeInvalidHeaderValue},
		{"cors off", nil, "http://a.test", "GET", "", CodeCorsPreflightFailure},
		{"origin", rules, "http://c.test", "GET", "", CodeCorsPreflightFailure},
		{"method", rules, "http://a.test", "DELETE", "", CodeCorsPreflightFailure},
		{"header", rules, "http://a.test", "GET", "x-ms-version,x-other", CodeCorsPreflightFailure},
		{"wildcard needs a subdomain", rules, "http://b.test", "GET", "", CodeCorsPreflightFailure},
		{"wildcard scheme", rules, "https://x.b.test", "GET", "", CodeCorsPreflightFailure},
		{"wildcard not across a port", rules, "http://x.b.test:81.b.test", "GET", "", CodeCorsPreflightFailure},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Preflight(c.rules, c.origin, c.method, c.header)
			if ErrorCode(err) != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
		})
	}
	if _, err := Preflight(rules, "http://x.y.b.test", "PUT", "x-ms-meta-a"); err != nil {
		t.Fatalf("subdomain wildcard: %v", err)
	}
}

func TestActualHeaders(t *testing.T) {
	exact := []CorsRule{{AllowedOrigins: "http://a.test", AllowedMethods: "GET,PUT", ExposedHeaders: "x-ms-meta*,x-custom", MaxAgeInSeconds: 1}}
	anyOrigin := []CorsRule{{AllowedOrigins: "*", AllowedMethods: "GET", ExposedHeaders: "x-ms-*", MaxAgeInSeconds: 1}}
	resp := http.Header{"X-Ms-Meta-Color": {"red"}, "X-Ms-Request-Id": {"1"}, "Content-Type": {"x"}}
	for _, c := range []struct {
		name           string
		rules          []CorsRule
		origin, method string
		want           http.Header
	}{
		{"cors off", nil, "http://a.test", "GET", http.Header{}},
		{"exact origin GET", exact, "http://a.test", "GET", http.Header{
			"Access-Control-Allow-Origin": {"http://a.test"}, "Access-Control-Allow-Credentials": {"true"},
			"Access-Control-Expose-Headers": {"x-ms-meta-color,x-custom"}, "Vary": {"Origin"}}},
		{"exact origin PUT: no Vary", exact, "http://a.test", "PUT", http.Header{
			"Access-Control-Allow-Origin": {"http://a.test"}, "Access-Control-Allow-Credentials": {"true"},
			"Access-Control-Expose-Headers": {"x-ms-meta-color,x-custom"}}},
		{"no matching rule GET", exact, "http://other.test", "GET", http.Header{"Vary": {"Origin"}}},
		{"no matching rule POST", exact, "http://other.test", "POST", http.Header{}},
		{"wildcard", anyOrigin, "http://other.test", "GET", http.Header{
			"Access-Control-Allow-Origin": {"*"}, "Access-Control-Expose-Headers": {"x-ms-meta-color,x-ms-request-id"}}},
		{"no origin, wildcard rule, GET", anyOrigin, "", "GET", http.Header{
			"Access-Control-Allow-Origin": {"*"}, "Access-Control-Expose-Headers": {"x-ms-meta-color,x-ms-request-id"}}},
		{"no origin, exact rule, GET", exact, "", "GET", http.Header{"Vary": {"Origin"}}},
		{"no origin, PUT", exact, "", "PUT", http.Header{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ActualHeaders(c.rules, c.origin, c.method, resp); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v\nwant %v", got, c.want)
			}
		})
	}
}
