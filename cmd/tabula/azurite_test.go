package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/azurite"
	"github.com/tabuladb/tabula/internal/edmtest"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/server/auth"
)

// azuriteVersion is the emulator the test runs: the newest release that
// runs on Node.js 20 (the benchmark pins the same one).
const azuriteVersion = "3.35.0"

// azuriteTableMain installs azurite@azuriteVersion with npm into the user's
// cache (shared with the benchmark's install) unless it is there, and
// returns the table service's entry script. Without Node.js or npm the
// test is skipped, unless TABULA_REQUIRE_JS_SDK is set (CI), when it fails.
func azuriteTableMain(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("TABULA_REQUIRE_JS_SDK") != "" {
			t.Fatalf("%s (TABULA_REQUIRE_JS_SDK is set, so this fails rather than skips)", msg)
		}
		t.Skipf("%s: the import-azurite test runs the real emulator", msg)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing("%s (Node.js) not found", tool)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "tabula-bench", "azurite-"+azuriteVersion)
	entry := filepath.Join(dir, "node_modules", "azurite", "dist", "src", "table", "main.js")
	if _, err := os.Stat(entry); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", "--save-exact", "azurite@"+azuriteVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			missing("npm install azurite@%s: %v: %s", azuriteVersion, err, out)
		}
	}
	return entry
}

// emulatorEntities are the entities the test writes through the emulator:
// every Edm edge value that JSON and the emulator (JavaScript) can carry,
// so not strings that are not UTF-8, nor the sign of -0.
func emulatorEntities() []*odata.Entity {
	var out []*odata.Entity
	for _, e := range edmtest.EdgeEntities() {
		if !utf8.ValidString(e.PartitionKey) || !utf8.ValidString(e.RowKey) {
			continue
		}
		c := *e
		c.Properties = nil
		for _, p := range e.Properties {
			v := p.Value
			if v.Type() == odata.TypeString && !utf8.ValidString(v.Str()) {
				continue
			}
			if v.Type() == odata.TypeDouble && v.Double() == 0 && math.Signbit(v.Double()) {
				continue
			}
			c.Properties = append(c.Properties, p)
		}
		out = append(out, &c)
	}
	return out
}

// entityBody is e as a request body, every non-inferable type annotated.
func entityBody(e *odata.Entity) []byte {
	m := map[string]any{"PartitionKey": e.PartitionKey, "RowKey": e.RowKey}
	for _, p := range e.Properties {
		v := p.Value
		ann := ""
		switch v.Type() {
		case odata.TypeString:
			m[p.Name] = v.Str()
		case odata.TypeInt32:
			m[p.Name] = v.Int32()
		case odata.TypeBoolean:
			m[p.Name] = v.Bool()
		case odata.TypeInt64:
			m[p.Name], ann = strconv.FormatInt(v.Int64(), 10), "Edm.Int64"
		case odata.TypeDouble:
			ann = "Edm.Double"
			switch f := v.Double(); {
			case math.IsNaN(f):
				m[p.Name] = "NaN"
			case math.IsInf(f, 1):
				m[p.Name] = "Infinity"
			case math.IsInf(f, -1):
				m[p.Name] = "-Infinity"
			default:
				m[p.Name] = json.Number(strconv.FormatFloat(f, 'g', -1, 64))
			}
		case odata.TypeDateTime:
			m[p.Name], ann = string(v.DateTime().AppendFixed(nil)), "Edm.DateTime"
		case odata.TypeGuid:
			m[p.Name], ann = v.Guid().String(), "Edm.Guid"
		case odata.TypeBinary:
			m[p.Name], ann = base64.StdEncoding.EncodeToString(v.Binary()), "Edm.Binary"
		}
		if ann != "" {
			m[p.Name+"@odata.type"] = ann
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// listAll reads every entity of a table through the SDK with full
// metadata and decodes each by the service's rules; Timestamps dropped.
func listAll(t *testing.T, c *aztables.Client) []*odata.Entity {
	t.Helper()
	var out []*odata.Entity
	pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Format: to.Ptr(aztables.MetadataFormatFull)})
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Entities {
			d, err := odata.DecodeEntityJSON(raw)
			if err != nil {
				t.Fatalf("decode %s: %v", raw, err)
			}
			e := d.Entity
			e.Timestamp = 0
			out = append(out, &e)
		}
	}
	slices.SortFunc(out, func(a, b *odata.Entity) int {
		if c := strings.Compare(a.PartitionKey, b.PartitionKey); c != 0 {
			return c
		}
		return strings.Compare(a.RowKey, b.RowKey)
	})
	return out
}

// sameProperties compares two entities' properties as sets (the emulator
// and Tabula may list them in different orders), every value bit for bit.
func sameProperties(a, b *odata.Entity) bool {
	if a.PartitionKey != b.PartitionKey || a.RowKey != b.RowKey || len(a.Properties) != len(b.Properties) {
		return false
	}
	for _, p := range a.Properties {
		v, ok := b.Get(p.Name)
		if !ok || !v.Identical(p.Value) {
			return false
		}
	}
	return true
}

// TestImportAzuriteFromARealEmulator runs the Azurite emulator, writes
// tables and entities of every Edm type in two accounts through the Go
// SDK (single writes, a batch, an update and a delete), reads them back
// through the SDK, stops the emulator so that it saves its database, runs
// `tabula import-azurite` on the file, serves the result with `tabula
// serve` and compares every entity through the SDK.
func TestImportAzuriteFromARealEmulator(t *testing.T) {
	entry := azuriteTableMain(t)
	root := t.TempDir()
	location := filepath.Join(root, "azurite")
	const accounts = "devstoreaccount1:" + auth.DevAccountKey + ";second:" + auth.DevAccountKey
	port := freePort(t)
	cmd := exec.Command("node", entry, "--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(port),
		"--location", location, "--disableTelemetry", "--skipApiVersionCheck")
	cmd.Env = append(os.Environ(), "AZURITE_ACCOUNTS="+accounts)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitFor := func(what string) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the emulator exited before %q", what)
				}
				if strings.Contains(l, what) {
					return
				}
			case <-timeout:
				t.Fatalf("the emulator did not print %q in 60 s", what)
			}
		}
	}
	waitFor("successfully started")

	conn := func(account, endpoint string) string {
		return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s/%s;", account, auth.DevAccountKey, endpoint, account)
	}
	azEndpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx := context.Background()
	type tableID struct{ account, table string }
	tables := []tableID{{"devstoreaccount1", "Edges"}, {"devstoreaccount1", "Batched"}, {"second", "Other"}, {"devstoreaccount1", "EmptyOne"}}
	for _, tb := range tables {
		if _, err := tableClient(t, conn(tb.account, azEndpoint), tb.table).CreateTable(ctx, nil); err != nil {
			t.Fatalf("create %v on the emulator: %v", tb, err)
		}
	}
	edges := tableClient(t, conn("devstoreaccount1", azEndpoint), "Edges")
	for _, e := range emulatorEntities() {
		if _, err := edges.AddEntity(ctx, entityBody(e), nil); err != nil {
			t.Fatalf("add %q/%q to the emulator: %v", e.PartitionKey, e.RowKey, err)
		}
	}
	// Replaced and deleted entities: the file holds only the latest state.
	if _, err := edges.UpsertEntity(ctx, entityBody(&odata.Entity{PartitionKey: "edge", RowKey: "ints", Properties: []odata.Property{{Name: "Replaced", Value: odata.Int64Value(-1)}}}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		t.Fatal(err)
	}
	if _, err := edges.DeleteEntity(ctx, "edge", "times", nil); err != nil {
		t.Fatal(err)
	}
	batched := tableClient(t, conn("devstoreaccount1", azEndpoint), "Batched")
	for p := range 3 {
		var actions []aztables.TransactionAction
		for r := range 120 / 3 {
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: entityBody(&odata.Entity{PartitionKey: fmt.Sprintf("p%d", p), RowKey: fmt.Sprintf("r%03d", r), Properties: []odata.Property{{Name: "N", Value: odata.Int32Value(int32(r))}, {Name: "When", Value: odata.DateTimeValue(odata.MinDateTime + odata.DateTime(r))}}})})
		}
		if _, err := batched.SubmitTransaction(ctx, actions, nil); err != nil {
			t.Fatal(err)
		}
	}
	other := tableClient(t, conn("second", azEndpoint), "Other")
	if _, err := other.AddEntity(ctx, entityBody(&odata.Entity{PartitionKey: "x", RowKey: "y", Properties: []odata.Property{{Name: "S", Value: odata.StringValue("in the second account")}}}), nil); err != nil {
		t.Fatal(err)
	}
	want := map[tableID][]*odata.Entity{}
	for _, tb := range tables {
		want[tb] = listAll(t, tableClient(t, conn(tb.account, azEndpoint), tb.table))
	}
	if len(want[tables[0]]) != len(emulatorEntities())-1 || len(want[tables[1]]) != 120 {
		t.Fatalf("the emulator holds %d and %d entities", len(want[tables[0]]), len(want[tables[1]]))
	}

	// Ctrl-C: the emulator saves its database and exits.
	cmd.Process.Signal(os.Interrupt)
	waitFor("successfully closed")
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the emulator did not exit after SIGINT")
	}
	file := filepath.Join(location, azurite.FileName)
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}

	data := filepath.Join(root, "data")
	code, stdout, stderr := tabula(t, "import-azurite", location, "--data", data)
	if code != 0 || !strings.Contains(stdout, "4 tables (4 created)") {
		t.Fatalf("import-azurite: exit %d: %s%s", code, stdout, stderr)
	}
	t.Log(strings.TrimSpace(stdout))
	// Loading the same file again changes nothing.
	if code, stdout, stderr := tabula(t, "import-azurite", file, "--data", data); code != 0 || !strings.Contains(stdout, "4 tables (0 created)") {
		t.Fatalf("second import-azurite: exit %d: %s%s", code, stdout, stderr)
	}

	p := startServeEnv(t, []string{"AZURITE_ACCOUNTS=" + accounts}, "--addr", "127.0.0.1:0", "--data", data)
	tabEndpoint := strings.TrimSuffix(strings.SplitN(p.connStr, "TableEndpoint=", 2)[1], "/devstoreaccount1;")
	for _, tb := range tables {
		got := listAll(t, tableClient(t, conn(tb.account, tabEndpoint), tb.table))
		w := want[tb]
		if len(got) != len(w) {
			t.Fatalf("%v: Tabula serves %d entities, the emulator served %d", tb, len(got), len(w))
		}
		for i := range w {
			if !sameProperties(got[i], w[i]) {
				t.Fatalf("%v entity %d:\nTabula   %+v\nemulator %+v", tb, i, got[i], w[i])
			}
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t)

	// A damaged file is refused, naming it and the position, and nothing
	// is written.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"truncated": raw[:len(raw)*2/3],
		"malformed": []byte(strings.Replace(string(raw), `"Edm.Int64"`, `"Edm.Int6"`, 1)),
	} {
		bad := filepath.Join(root, name+".json")
		os.WriteFile(bad, content, 0o600)
		fresh := filepath.Join(root, "fresh-"+name)
		code, _, stderr := tabula(t, "import-azurite", bad, "--data", fresh)
		if code != 1 || !strings.Contains(stderr, bad+": byte offset ") || !strings.Contains(stderr, "nothing was imported") {
			t.Fatalf("import-azurite of a %s file: exit %d: %s", name, code, stderr)
		}
		if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused import-azurite created %s", fresh)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
