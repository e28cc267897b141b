package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The development account both servers serve.
const (
	devAccount = "devstoreaccount1"
	devKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// serverKind knows how to start one Table service implementation.
type serverKind struct {
	name string
	// launch returns the commands that run the server with its data in
	// dir, one per process, and the loopback address each will serve the
	// REST API on; the caller starts them and waits for the addresses. A
	// server launched again on the same dir must listen where it did
	// (a cluster's nodes know each other by address).
	launch func(dir string) ([]*exec.Cmd, []string, error)
	// pick chooses, once every address accepts connections, the process
	// clients talk to; nil means the first.
	pick func(s *server) (int, error)
	// route, when set, wraps the clients' transport: a cluster's sends
	// each request to the node holding its table's lease.
	route func(s *server, base http.RoundTripper) (http.RoundTripper, func())
}

// onePort is the launch of a one-process server on a fresh port.
func onePort(command func(port int, dir string) *exec.Cmd) func(dir string) ([]*exec.Cmd, []string, error) {
	return func(dir string) ([]*exec.Cmd, []string, error) {
		port, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		return []*exec.Cmd{command(port, dir)}, []string{fmt.Sprintf("127.0.0.1:%d", port)}, nil
	}
}

// server is a running Table service: one process, or a cluster's.
type server struct {
	kind     serverKind
	dir      string
	procs    []*process
	endpoint string // http://addr/devstoreaccount1 of the process clients use
}

// process is one process of a server.
type process struct {
	cmd    *exec.Cmd
	addr   string // its REST address
	exited chan struct{}
	stderr *strings.Builder
}

// tabulaKind runs a tabula binary: the one built from the repository, or
// a baseline.
func tabulaKind(name, binary string, extra []string) serverKind {
	return serverKind{name: name, launch: onePort(func(port int, dir string) *exec.Cmd {
		args := append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data", dir, "--log-level", "error"}, extra...)
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "AZURITE_ACCOUNTS=")
		return cmd
	})}
}

// azuriteKind runs the Azurite emulator's table service from an npm
// install, on loopback only and with telemetry off.
func azuriteKind(entry string) serverKind {
	return serverKind{name: "azurite", launch: onePort(func(port int, dir string) *exec.Cmd {
		return exec.Command("node", entry, "--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(port),
			"--location", dir, "--disableTelemetry", "--skipApiVersionCheck", "--silent")
	})}
}

// buildTabula compiles cmd/tabula into dir.
func buildTabula(repo, dir string) (string, error) {
	out := filepath.Join(dir, "tabula-server")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/tabula")
	cmd.Dir = repo
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building tabula: %v: %s", err, msg)
	}
	return out, nil
}

// azuriteVersion is the emulator the suite installs, pinned: the newest
// release whose package.json accepts Node.js 20 (3.36.0 asks for >= 21,
// 3.37.0 for >= 22), which is what CI's distribution package provides.
const azuriteVersion = "3.35.0"

// azuriteInstall is an installed emulator and what the report states
// about it, read from the installed files.
type azuriteInstall struct {
	entry   string // the table service's entry script
	version string // node_modules/azurite/package.json
	lokijs  string // node_modules/lokijs/package.json
	node    string // node --version
	// autosaveMS is the LokiJS autosaveInterval of the table store, read
	// from autosaveFile (relative to node_modules); lokiFsync tells
	// whether LokiJS's file adapter calls fsync anywhere.
	autosaveMS   int
	autosaveFile string
	lokiFsync    bool
}

// installAzurite installs azurite@azuriteVersion into cache/azurite-<version>
// (once) and reads what the report needs from the installed files.
func installAzurite(cache string, log io.Writer) (*azuriteInstall, error) {
	dir := filepath.Join(cache, "azurite-"+azuriteVersion)
	modules := filepath.Join(dir, "node_modules")
	in := &azuriteInstall{entry: filepath.Join(modules, "azurite", "dist", "src", "table", "main.js")} // package.json bin "azurite-table"
	if _, err := exec.LookPath("node"); err != nil {
		return nil, errors.New("node (Node.js) not found: the Azurite comparison needs it")
	}
	if _, err := os.Stat(in.entry); err != nil {
		if _, err := exec.LookPath("npm"); err != nil {
			return nil, errors.New("npm not found: the Azurite comparison installs the emulator with it")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "installing azurite@%s into %s\n", azuriteVersion, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", "--save-exact", "azurite@"+azuriteVersion)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install azurite@%s: %v: %s", azuriteVersion, err, msg)
		}
		if _, err := os.Stat(in.entry); err != nil {
			return nil, fmt.Errorf("azurite installed but %s is missing", in.entry)
		}
	}
	var err error
	if in.version, err = packageVersion(filepath.Join(modules, "azurite")); err != nil {
		return nil, err
	}
	if in.version != azuriteVersion {
		return nil, fmt.Errorf("%s holds azurite %s, not the pinned %s", dir, in.version, azuriteVersion)
	}
	if in.lokijs, err = packageVersion(filepath.Join(modules, "lokijs")); err != nil {
		return nil, err
	}
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		in.node = strings.TrimSpace(string(out))
	}
	in.autosaveFile = filepath.Join("azurite", "dist", "src", "table", "persistence", "LokiTableMetadataStore.js")
	src, err := os.ReadFile(filepath.Join(modules, in.autosaveFile))
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`autosaveInterval:\s*(\d+)`).FindSubmatch(src)
	if m == nil {
		return nil, fmt.Errorf("no autosaveInterval in %s", in.autosaveFile)
	}
	in.autosaveMS, _ = strconv.Atoi(string(m[1]))
	loki, err := os.ReadFile(filepath.Join(modules, "lokijs", "src", "lokijs.js"))
	if err != nil {
		return nil, err
	}
	in.lokiFsync = strings.Contains(string(loki), "fsync")
	return in, nil
}

// packageVersion reads the version of the npm package in dir.
func packageVersion(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", err
	}
	var pkg struct{ Version string }
	if err := json.Unmarshal(data, &pkg); err != nil {
		return "", fmt.Errorf("%s/package.json: %w", dir, err)
	}
	return pkg.Version, nil
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts a server of kind on dir and waits until every one of
// its processes accepts connections.
func startServer(kind serverKind, dir string) (*server, error) {
	cmds, addrs, err := kind.launch(dir)
	if err != nil {
		return nil, err
	}
	s := &server{kind: kind, dir: dir}
	for i, cmd := range cmds {
		p, err := startProcess(kind.name, cmd, addrs[i])
		if err != nil {
			s.kill()
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	client := 0
	if kind.pick != nil {
		if client, err = kind.pick(s); err != nil {
			s.kill()
			return nil, err
		}
	}
	s.endpoint = "http://" + s.procs[client].addr + "/" + devAccount
	return s, nil
}

// startProcess starts cmd and waits until addr accepts connections.
func startProcess(name string, cmd *exec.Cmd, addr string) (*process, error) {
	p := &process{cmd: cmd, addr: addr, exited: make(chan struct{}), stderr: new(strings.Builder)}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
		cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited at start: %s", name, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s did not listen on %s within 60 s", name, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops every process of the server with SIGKILL and waits for them.
func (s *server) kill() {
	for _, p := range s.procs {
		p.kill()
	}
}

// stop stops the server's processes with SIGTERM (a clean shutdown), or
// SIGKILL after 30 s.
func (s *server) stop() {
	for _, p := range s.procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			p.kill()
		}
	}
}

func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// cpuSeconds is the user+system CPU time the server's processes have
// used so far, summed.
func (s *server) cpuSeconds() (float64, error) {
	var sum float64
	for _, p := range s.procs {
		cpu, err := p.cpuSeconds()
		if err != nil {
			return 0, err
		}
		sum += cpu
	}
	return sum, nil
}

// peakRSS is the sum of the server's processes' VmHWM in bytes.
func (s *server) peakRSS() int64 {
	var sum int64
	for _, p := range s.procs {
		sum += p.peakRSS()
	}
	return sum
}

// cpuSeconds is the process's user+system CPU time so far.
func (p *process) cpuSeconds() (float64, error) {
	pid := p.cmd.Process.Pid
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the ")" that ends the command name: state is field 3,
	// utime and stime are fields 14 and 15.
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on
// every Linux platform Go supports.
const clockTicks = 100

// peakRSS is the process's VmHWM in bytes.
func (p *process) peakRSS() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	var hwm, rss int64
	parseProcFields(data, map[string]*int64{"VmHWM": &hwm, "VmRSS": &rss})
	return hwm
}
