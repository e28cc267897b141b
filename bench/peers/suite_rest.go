package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// restFlags are the REST suite's settings.
type restFlags struct {
	common
	systems, workloads string
	conns              int
	dur                time.Duration
	ops                int
	dataN, scanN       int
	durabilityN        int
	cache              string
	results            string
	tabulaArgs         string
	baseBin            string
	clusterN, kills    int
	rangeGroups        bool
	emulateLimits      bool
	partitionRate      float64
	accountRate        float64
	limitsSecs         int
}

func (f *restFlags) register(fs *flag.FlagSet) {
	f.common.register(fs)
	fs.StringVar(&f.systems, "systems", "tabula,azurite,floor", "servers to compare, in the order each repeat runs them: tabula, azurite, floor (a bare net/http server sending answers of Tabula's size: the transport's cost), base (the tabula binary -base-bin names), cluster and cluster-base (with -cluster: a cluster of this checkout, or of the -base-bin binary); ratios are the first against the second")
	fs.StringVar(&f.baseBin, "base-bin", "", "a tabula binary built from another commit, run as system \"base\" beside this checkout's (e.g. -systems tabula,base to measure a change), and as the nodes of system \"cluster-base\" (-cluster 3 -systems cluster,cluster-base)")
	fs.StringVar(&f.workloads, "workloads", strings.Join(restWorkloadNames(), ","), "workloads to run")
	fs.IntVar(&f.conns, "conns", 16, "keep-alive connections (concurrent clients)")
	fs.DurationVar(&f.dur, "dur", 3*time.Second, "duration of each measured phase")
	fs.IntVar(&f.ops, "ops", 0, "operations per phase (0: until -dur)")
	fs.IntVar(&f.dataN, "data-n", 10_000, "entities read and updated by get, update, mixed and partquery (in partitions of 100)")
	fs.IntVar(&f.scanN, "scan-n", 100_000, "entities the cross-partition filtered scan reads")
	fs.IntVar(&f.durabilityN, "durability-n", 2000, "acknowledged inserts before the kill -9 test and before the cut of the power-loss test (0: neither)")
	fs.StringVar(&f.cache, "cache", defaultCache(), "folder for the pinned azurite npm install (azurite-<version>) and the tabula build")
	fs.StringVar(&f.results, "results", "", "also write the report to this file, e.g. ../RESULTS-rest.md")
	fs.IntVar(&f.clusterN, "cluster", 0, "run system \"cluster\", Tabula as this many nodes on this machine, first among the systems (so the ratios are the cluster against the single node), and its failover test")
	fs.BoolVar(&f.rangeGroups, "range-groups", true, "with -cluster: every table in a raft group of its own (tabula serve's default); false runs the nodes with --range-groups=false (every table's entities in the one system group)")
	fs.IntVar(&f.kills, "kills", 5, "with -cluster: kills of the written range's leaseholder in the failover test (0: none)")
	fs.BoolVar(&f.emulateLimits, "emulate-limits", false, "also run the limits phase: tabula serve --emulate-limits, one hot partition beside scattered ones (-workloads \"\" runs it alone)")
	fs.Float64Var(&f.partitionRate, "partition-rate", 2000, "with -emulate-limits: the partition limit, entities/s")
	fs.Float64Var(&f.accountRate, "account-rate", 20000, "with -emulate-limits: the account limit, entities/s")
	fs.IntVar(&f.limitsSecs, "limits-secs", 10, "with -emulate-limits: seconds the limits phase runs")
	fs.StringVar(&f.tabulaArgs, "tabula-args", "", "extra arguments for `tabula serve`, space-separated, e.g. \"--pprof 127.0.0.1:6060\" to profile it under load; with -cluster, {node} becomes each node's number (\"--pprof 127.0.0.1:606{node}\")")
}

func defaultCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tabula-bench")
	}
	return filepath.Join(os.TempDir(), "tabula-bench")
}

// restWorkload is one REST workload: setup-free once the server holds the
// shared data set.
type restWorkload struct {
	name string
	op   func(rc *restCtx) loadOp
}

// restCtx is what the workloads of one server instance share.
type restCtx struct {
	c            *tableClient
	dataN, scanN int
	seq          atomic.Int64 // unique keys across workloads
}

func restWorkloads() []restWorkload {
	insertInto := func(table string, pk func(rc *restCtx, w, i int, n int64) string) func(rc *restCtx) loadOp {
		return func(rc *restCtx) loadOp {
			return func(w, i int) (int, bool, error) {
				n := rc.seq.Add(1)
				ok, err := answered(rc.c.do("POST", "/"+table, "application/json", benchEntityJSON(pk(rc, w, i, n), fmt.Sprintf("r%09d", n), int(n)), "Prefer", "return-no-content"))
				return 1, ok, err
			}
		}
	}
	randomData := func(rc *restCtx, w, i int) (string, string) {
		k := int(rand.Uint64N(uint64(rc.dataN)))
		return fmt.Sprintf("p%04d", k/100), fmt.Sprintf("r%03d", k%100)
	}
	get := func(rc *restCtx, w, i int) (int, bool, error) {
		pk, rk := randomData(rc, w, i)
		ok, err := answered(rc.c.do("GET", entityPath("data", pk, rk), "", nil))
		return 1, ok, err
	}
	update := func(rc *restCtx, w, i int) (int, bool, error) {
		pk, rk := randomData(rc, w, i)
		ok, err := answered(rc.c.do("PUT", entityPath("data", pk, rk), "application/json", benchEntityJSON(pk, rk, i), "If-Match", "*"))
		return 1, ok, err
	}
	return []restWorkload{
		{"insert", insertInto("ins", func(rc *restCtx, w, i int, n int64) string { return fmt.Sprintf("w%02d", w) })},
		{"get", func(rc *restCtx) loadOp { return func(w, i int) (int, bool, error) { return get(rc, w, i) } }},
		{"update", func(rc *restCtx) loadOp { return func(w, i int) (int, bool, error) { return update(rc, w, i) } }},
		{"mixed", func(rc *restCtx) loadOp {
			return func(w, i int) (int, bool, error) {
				if i%2 == 0 {
					return get(rc, w, i)
				}
				return update(rc, w, i)
			}
		}},
		{"partquery", func(rc *restCtx) loadOp {
			return func(w, i int) (int, bool, error) {
				pk := fmt.Sprintf("p%04d", rand.IntN(max(rc.dataN/100, 1)))
				return rc.walk("data", "PartitionKey eq '"+pk+"'")
			}
		}},
		{"scan", func(rc *restCtx) loadOp {
			return func(w, i int) (int, bool, error) {
				_, ok, err := rc.walk("scan", "Tag eq 'tag5' and Count ge 0")
				return rc.scanN, ok, err // every entity was read to apply the filter
			}
		}},
		{"batch100", func(rc *restCtx) loadOp {
			return func(w, i int) (int, bool, error) {
				n := rc.seq.Add(1)
				rks := make([]string, 100)
				for j := range rks {
					rks[j] = fmt.Sprintf("r%03d", j)
				}
				ct, body := batchBody(rc.c.endpoint, "batch", fmt.Sprintf("b%09d", n), rks, int(n))
				ok, err := answered(rc.c.do("POST", "/$batch", ct, body, benchTableHeader, "batch"))
				return 100, ok, err
			}
		}},
		{"hotpartition", insertInto("hot", func(rc *restCtx, w, i int, n int64) string { return "hot" })},
		{"append-pk", insertInto("appendpk", func(rc *restCtx, w, i int, n int64) string { return fmt.Sprintf("%015d", time.Now().UnixNano()) })},
		{"scattered-pk", insertInto("scattered", func(rc *restCtx, w, i int, n int64) string {
			h := fnv.New64a()
			fmt.Fprint(h, n)
			return strconv.FormatUint(h.Sum64(), 36)
		})},
	}
}

func restWorkloadNames() []string {
	var out []string
	for _, w := range restWorkloads() {
		out = append(out, w.name)
	}
	return out
}

// walk runs a query to its end, page by page, and counts the entities.
func (rc *restCtx) walk(table, filter string) (int, bool, error) {
	count := 0
	next := ""
	for {
		path := "/" + table + "()?$filter=" + url.QueryEscape(filter) + next
		r, err := rc.c.do("GET", path, "", nil)
		if ok, err := answered(r, err); !ok {
			return count, false, err
		}
		var feed struct{ Value []json.RawMessage }
		if err := json.Unmarshal(r.body, &feed); err != nil {
			return count, false, err
		}
		count += len(feed.Value)
		pk := r.header.Get("x-ms-continuation-NextPartitionKey")
		if pk == "" {
			return count, true, nil
		}
		next = "&NextPartitionKey=" + url.QueryEscape(pk) + "&NextRowKey=" + url.QueryEscape(r.header.Get("x-ms-continuation-NextRowKey"))
	}
}

// setup creates the tables and loads the shared data set with batches.
func (rc *restCtx) setup(conns int) error {
	for _, t := range []string{"ins", "data", "scan", "batch", "hot", "appendpk", "scattered", "durable"} {
		if r, err := rc.c.do("POST", "/Tables", "application/json", fmt.Appendf(nil, `{"TableName":%q}`, t), "Prefer", "return-no-content"); err != nil || !r.ok() {
			return fmt.Errorf("create table %s: %v %d %s", t, err, r.status, r.body)
		}
	}
	load := func(table string, n, perPartition int) error {
		parts := (n + perPartition - 1) / perPartition
		batches := 0
		for p := range parts {
			batches += (min(perPartition, n-p*perPartition) + 99) / 100
		}
		res := drive(conns, 0, batches, func(w, i int) (int, bool, error) {
			// Batch i: partition i / (perPartition/100), its hundred.
			per := (perPartition + 99) / 100
			p, h := i/per, i%per
			var rks []string
			for j := h * 100; j < min((h+1)*100, perPartition, n-p*perPartition); j++ {
				rks = append(rks, fmt.Sprintf("r%03d", j))
			}
			ct, body := batchBody(rc.c.endpoint, table, fmt.Sprintf("p%04d", p), rks, p*perPartition+h*100)
			ok, err := answered(rc.c.do("POST", "/$batch", ct, body, benchTableHeader, table))
			return len(rks), ok, err
		})
		if res.errors > 0 || res.entities != int64(n) {
			return fmt.Errorf("loading %s: %d of %d entities, %d errors (%v)", table, res.entities, n, res.errors, res.firstErr)
		}
		return nil
	}
	if err := load("data", rc.dataN, 100); err != nil {
		return err
	}
	return load("scan", rc.scanN, 1000)
}

// runRESTSuite is the rest subcommand.
func runRESTSuite(args []string, log io.Writer) error {
	var f restFlags
	fs := flag.NewFlagSet("rest", flag.ContinueOnError)
	fs.SetOutput(log)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	systemsGiven := false
	fs.Visit(func(fl *flag.Flag) { systemsGiven = systemsGiven || fl.Name == "systems" })
	if f.clusterN > 0 && !systemsGiven {
		f.systems = clusterSystem + ",tabula"
	}
	env, err := f.setup(log)
	if err != nil {
		return err
	}
	rep := &svcReport{Suite: "rest", Command: commandLine("rest", args), Started: time.Now(), Repeats: f.repeats,
		Machine: describeMachine(env.run.tmpRoot), Systems: splitList(f.systems), Workloads: splitList(f.workloads),
		Params: map[string]string{"conns": strconv.Itoa(f.conns), "dur": f.dur.String(), "ops": strconv.Itoa(f.ops),
			"data-n": strconv.Itoa(f.dataN), "scan-n": strconv.Itoa(f.scanN), "durability-n": strconv.Itoa(f.durabilityN)}}
	if f.clusterN > 0 {
		rep.Params["cluster"], rep.Params["kills"] = strconv.Itoa(f.clusterN), strconv.Itoa(f.kills)
		rep.Params["range-groups"] = strconv.FormatBool(f.rangeGroups)
	}
	if f.emulateLimits {
		rep.Params["partition-rate"], rep.Params["account-rate"] = fmt.Sprint(f.partitionRate), fmt.Sprint(f.accountRate)
		rep.Params["limits-secs"] = strconv.Itoa(f.limitsSecs)
	}
	kinds := map[string]serverKind{}
	for _, sys := range rep.Systems {
		switch sys {
		case "tabula":
			bin, err := buildTabula(env.repo, f.cache)
			if err != nil {
				return err
			}
			kinds[sys] = tabulaKind(sys, bin, strings.Fields(f.tabulaArgs))
			rep.Notes = append(rep.Notes, "tabula: `tabula serve` built from this checkout, synced writes (every acknowledged write is on disk)")
			rep.Acks = append(rep.Acks, ackMeaning{sys, tabulaAck})
		case clusterSystem, clusterBaseSystem:
			if f.clusterN < 1 {
				return fmt.Errorf("system %s needs -cluster N", sys)
			}
			bin, from := f.baseBin, f.baseBin
			if sys == clusterSystem {
				if bin, err = buildTabula(env.repo, f.cache); err != nil {
					return err
				}
				from = "this checkout"
			} else if bin == "" {
				return errors.New("system cluster-base needs -base-bin")
			}
			args, groups := strings.Fields(f.tabulaArgs), "every table in a raft group of its own beside the system group"
			if !f.rangeGroups {
				args, groups = append(args, "--range-groups=false"), "one raft group (--range-groups=false)"
			}
			kinds[sys] = clusterKind(sys, bin, f.clusterN, args)
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d `tabula serve` nodes of %s on this machine, %s, every write fsynced in the raft log of a quorum before it is acknowledged; the clients talk to the leader; CPU and peak RSS are the sums over the nodes", sys, f.clusterN, from, groups))
			rep.Acks = append(rep.Acks, ackMeaning{sys, "in the raft log of a quorum of nodes, fsynced on each, and applied by the leader"})
		case "base":
			if f.baseBin == "" {
				return errors.New("system base needs -base-bin")
			}
			kinds[sys] = tabulaKind(sys, f.baseBin, strings.Fields(f.tabulaArgs))
			rep.Notes = append(rep.Notes, "base: `tabula serve` from "+f.baseBin+", synced writes")
			rep.Acks = append(rep.Acks, ackMeaning{sys, tabulaAck + " (another build: its power loss is not simulated)"})
		case "azurite":
			az, err := installAzurite(f.cache, log)
			if err != nil {
				return err
			}
			kinds[sys] = azuriteKind(az.entry)
			rep.Versions = append(rep.Versions, "azurite "+az.version+" (npm, pinned)", "LokiJS "+az.lokijs, "Node.js "+az.node)
			rep.Notes = append(rep.Notes, "azurite: npm package `azurite@"+az.version+"`, table service, `--disableTelemetry --skipApiVersionCheck --silent`, LokiJS persistence in a temporary `--location`")
			rep.Acks = append(rep.Acks, ackMeaning{sys, az.ackMeaning()})
			rep.PowerLoss = append(rep.PowerLoss, powerLossRun{System: sys, Method: "computed", IntervalMS: az.autosaveMS})
		case floorSystem:
			kinds[sys] = floorKind(env.run.exe)
			rep.Notes = append(rep.Notes, "floor: not a Table service: a bare server on Go's net/http answering each request with a status line, header block and body of exactly the length of Tabula's answer to it (TestFloorMatchesTabula compares them off the socket), without authentication, parsing or storage; the transport's own cost (no scan, no durability test)")
		case "floor-nethttp":
			return errors.New("system floor-nethttp is now floor: the floor runs on net/http only")
		default:
			return fmt.Errorf("unknown system %q: want tabula, base, cluster, cluster-base, azurite or floor", sys)
		}
	}
	byName := map[string]restWorkload{}
	for _, w := range restWorkloads() {
		byName[w.name] = w
	}
	for _, w := range rep.Workloads {
		if _, ok := byName[w]; !ok {
			return fmt.Errorf("unknown workload %q", w)
		}
	}
	if len(rep.Workloads) == 0 {
		rep.Systems = nil // the limits phase alone
	}
	steps := f.repeats * len(rep.Systems)
	if f.durabilityN > 0 {
		for _, sys := range rep.Systems {
			if !isFloor(sys) {
				steps++ // kill -9
			}
			if sys == "tabula" {
				steps++ // power loss
			}
		}
	}
	failover := f.clusterN > 0 && f.kills > 0 && slices.Contains(rep.Systems, clusterSystem)
	if failover {
		steps++
	}
	if f.emulateLimits {
		steps++
	}
	prog := newProgress(steps)
	for r := range f.repeats {
		for _, sys := range rep.Systems {
			prog.start(fmt.Sprintf("repeat %d, %s", r+1, sys))
			runs, err := runRESTRepeat(kinds[sys], env.run.tmpRoot, r, &f, rep.Workloads, byName)
			prog.finish()
			if err != nil {
				return fmt.Errorf("%s repeat %d: %w", sys, r, err)
			}
			rep.Runs = append(rep.Runs, runs...)
		}
	}
	if f.durabilityN > 0 {
		for _, sys := range rep.Systems {
			if isFloor(sys) {
				continue // it stores nothing
			}
			prog.start("kill -9 test, " + sys)
			rep.Durability = append(rep.Durability, durability(kinds[sys], env.run.tmpRoot, f.durabilityN, f.conns))
			prog.finish()
		}
		if slices.Contains(rep.Systems, "tabula") {
			prog.start("power loss on a crash clone, tabula")
			rep.PowerLoss = append(rep.PowerLoss, powerLossTabula(f.durabilityN, f.conns, 1))
			prog.finish()
		}
	}
	if failover {
		prog.start("failover: kill -9 of the leaseholder under writes")
		fo := clusterFailover(kinds[clusterSystem], env.run.tmpRoot, f.clusterN, f.kills, f.conns)
		rep.Failover = &fo
		prog.finish()
	}
	if f.emulateLimits {
		bin, err := buildTabula(env.repo, f.cache)
		if err != nil {
			return err
		}
		prog.start("emulated limits: a hot partition beside scattered ones")
		lr := limitsPhase(bin, env.run.tmpRoot, f.partitionRate, f.accountRate, f.limitsSecs, f.conns)
		rep.Limits = &lr
		prog.finish()
	}
	rep.Elapsed = time.Since(rep.Started).Seconds()
	rep.summarize()
	path, err := rep.write(env.out, f.results)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "rest suite: %s\n", path)
	return rep.errorsErr()
}

func (f *restFlags) check() error {
	if f.conns < 1 || f.dataN < 100 || f.scanN < 1 {
		return errors.New("-conns must be positive, -data-n at least 100, -scan-n positive")
	}
	if f.emulateLimits && (!(f.partitionRate > 0) || !(f.accountRate >= f.partitionRate) || f.limitsSecs < 2) {
		return errors.New("-emulate-limits: -partition-rate must be positive, -account-rate at least -partition-rate, -limits-secs at least 2")
	}
	return f.common.check()
}

// runRESTRepeat starts one server on a fresh directory, loads the data set
// and measures each workload.
func runRESTRepeat(kind serverKind, tmp string, repeat int, f *restFlags, workloads []string, byName map[string]restWorkload) ([]svcRun, error) {
	dir, err := os.MkdirTemp(tmp, "rest-"+kind.name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(kind, dir)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rc := &restCtx{c: newTableClient(srv.endpoint, f.conns), dataN: f.dataN, scanN: f.scanN}
	if kind.route != nil {
		var stopRoutes func()
		rc.c.http.Transport, stopRoutes = kind.route(srv, rc.c.http.Transport)
		defer stopRoutes()
	}
	if err := rc.setup(f.conns); err != nil {
		return nil, err
	}
	var runs []svcRun
	for _, name := range workloads {
		if isFloor(kind.name) && !floorWorkloads[name] {
			continue
		}
		cpu0, err := srv.cpuSeconds()
		if err != nil {
			return nil, err
		}
		workers := f.conns
		if name == "scan" {
			workers = 1 // one client walking the table, as an analytics job would
		}
		res := drive(workers, f.dur, f.ops, byName[name].op(rc))
		cpu1, _ := srv.cpuSeconds()
		run := res.run(kind.name, name, repeat)
		run.CPUSeconds, run.PeakRSS = cpu1-cpu0, srv.peakRSS()
		runs = append(runs, run)
	}
	return runs, nil
}

// tabulaAck is what Tabula's acknowledgement of a write means.
const tabulaAck = "fsynced: `tabula serve` opens its store with synced writes, so a write is acknowledged once its WAL record is on disk (concurrent writes share an fsync)"

// ackMeaning says what the emulator's acknowledgement means, from its
// installed files.
func (az *azuriteInstall) ackMeaning() string {
	save := "writing a temporary file and renaming it over the database, with no fsync (LokiJS " + az.lokijs + "'s file adapter never calls fsync)"
	if az.lokiFsync {
		save = "writing the database file (LokiJS " + az.lokijs + " mentions fsync: check whether its file adapter uses it)"
	}
	return fmt.Sprintf("in memory, not on disk: Azurite %s keeps tables in a LokiJS database that it autosaves every %s (`autosaveInterval: %d` in `node_modules/%s`), %s",
		az.version, fmtMS(az.autosaveMS), az.autosaveMS, filepath.ToSlash(az.autosaveFile), save)
}
