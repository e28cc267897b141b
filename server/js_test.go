package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabuladb/tabula/server/auth"
)

// requireJSEnv names the variable .ci/run sets: where it is set, a
// missing Node.js or JS SDK fails the test instead of skipping it, since
// CI promises the JS SDK runs.
const requireJSEnv = "TABULA_REQUIRE_JS_SDK"

// TestJSSDK drives the server with the official JS SDK, @azure/data-tables,
// pinned in testdata/jssdk/package.json, once per way of reaching it:
// plain path-style URLs, HTTPS, production-style URLs over HTTPS, and a
// bearer token. .ci/run installs Node.js and the SDK; elsewhere the test
// skips, saying why, when Node.js is missing.
func TestJSSDK(t *testing.T) {
	node := requireJSSDK(t)
	dir := filepath.Join("testdata", "jssdk")
	for _, w := range sdkWays {
		t.Run(w.name, func(t *testing.T) {
			ts := startServerFor(t, w, nil)
			env := []string{}
			switch {
			case w.bearer:
				env = append(env, "TABULA_TABLE_ENDPOINT="+ts.accountURL(w), "TABULA_BEARER=1")
			case w.hostStyle:
				env = append(env, "TABULA_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey="+
					auth.DevAccountKey+";TableEndpoint="+ts.accountURL(w)+";")
			default:
				env = append(env, "TABULA_CONNECTION_STRING="+devConnectionString(ts.Endpoint))
			}
			if w.hostStyle {
				env = append(env, "TABULA_LOOPBACK_HOSTS=1")
			}
			if ts.CertPath != "" {
				env = append(env, "NODE_EXTRA_CA_CERTS="+ts.CertPath)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "smoke.mjs")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node smoke.mjs: %v\n%s", err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// requireJSSDK returns Node.js, with the JS SDK installed in
// testdata/jssdk, or skips the test saying why (fails it where
// TABULA_REQUIRE_JS_SDK is set).
func requireJSSDK(t *testing.T) (node string) {
	t.Helper()
	skip := t.Skip
	if os.Getenv(requireJSEnv) != "" {
		skip = t.Fatal
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("Node.js not found: the JS SDK test needs it (.ci/run installs it)")
	}
	dir := filepath.Join("testdata", "jssdk")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@azure", "data-tables")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			skip("npm not found: the JS SDK test needs it to install @azure/data-tables (.ci/run installs it)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	return node
}
