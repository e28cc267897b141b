package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	// start runs the server on port with its data in dir and returns the
	// process; the caller waits for the port.
	start func(port int, dir string) (*exec.Cmd, error)
}

// server is a running Table service process.
type server struct {
	kind     serverKind
	cmd      *exec.Cmd
	dir      string
	endpoint string // http://127.0.0.1:port/devstoreaccount1
	exited   chan struct{}
	stderr   *strings.Builder
}

// tabulaKind runs a tabula binary: the one built from the repository, or
// a baseline.
func tabulaKind(name, binary string, extra []string) serverKind {
	return serverKind{name: name, start: func(port int, dir string) (*exec.Cmd, error) {
		args := append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data", dir, "--log-level", "error"}, extra...)
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "AZURITE_ACCOUNTS=")
		return cmd, nil
	}}
}

// azuriteKind runs the Azurite emulator's table service from an npm
// install, on loopback only and with telemetry off.
func azuriteKind(entry string) serverKind {
	return serverKind{name: "azurite", start: func(port int, dir string) (*exec.Cmd, error) {
		return exec.Command("node", entry, "--tableHost", "127.0.0.1", "--tablePort", strconv.Itoa(port),
			"--location", dir, "--disableTelemetry", "--skipApiVersionCheck", "--silent"), nil
	}}
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

// installAzurite installs the azurite npm package into cache (once) and
// returns the table service's entry script.
func installAzurite(cache string, log io.Writer) (string, error) {
	entry := filepath.Join(cache, "node_modules", "azurite", "dist", "src", "table", "main.js") // package.json bin "azurite-table"
	if _, err := os.Stat(entry); err == nil {
		return entry, nil
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("node (Node.js) not found: the Azurite comparison needs it")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "installing azurite into %s\n", cache)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", cache, "--no-audit", "--no-fund", "--loglevel=error", "azurite")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install azurite: %v: %s", err, msg)
	}
	if _, err := os.Stat(entry); err != nil {
		return "", fmt.Errorf("azurite installed but %s is missing", entry)
	}
	return entry, nil
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

// startServer starts a server of kind on dir and waits until it accepts
// connections.
func startServer(kind serverKind, dir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd, err := kind.start(port, dir)
	if err != nil {
		return nil, err
	}
	s := &server{kind: kind, cmd: cmd, dir: dir, endpoint: fmt.Sprintf("http://127.0.0.1:%d/%s", port, devAccount),
		exited: make(chan struct{}), stderr: new(strings.Builder)}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", kind.name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
		cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			conn.Close()
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%s exited at start: %s", kind.name, s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("%s did not listen within 60 s", kind.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL and waits for it.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// stop stops the server with SIGTERM (a clean shutdown), or SIGKILL after
// 30 s.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.kill()
	}
}

// cpuSeconds is the server process's user+system CPU time so far.
func (s *server) cpuSeconds() (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the ")" that ends the command name: state is field 3,
	// utime and stime are fields 14 and 15.
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", s.cmd.Process.Pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on
// every Linux platform Go supports.
const clockTicks = 100

// peakRSS is the server process's VmHWM in bytes.
func (s *server) peakRSS() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	var hwm, rss int64
	parseProcFields(data, map[string]*int64{"VmHWM": &hwm, "VmRSS": &rss})
	return hwm
}
