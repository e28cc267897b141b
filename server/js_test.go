package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestJSSDK drives the server with the official JS SDK, @azure/data-tables,
// pinned in testdata/jssdk/package.json. .ci/run installs Node.js and the
// SDK, so in CI it runs; elsewhere it skips, saying why, when Node.js is
// missing.
func TestJSSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("Node.js not found: the JS SDK test needs it (.ci/run installs it)")
	}
	dir := filepath.Join("testdata", "jssdk")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@azure", "data-tables")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("npm not found: the JS SDK test needs it to install @azure/data-tables (.ci/run installs it)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	ts := startServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "smoke.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TABULA_CONNECTION_STRING="+devConnectionString(ts.Endpoint))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node smoke.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
