package main

import (
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/tabuladb/tabula/server"
)

// emulateFlags are serve's flags for emulating the service's limits and
// failures (docs/limits.md, docs/faults.md). All are off by default.
type emulateFlags struct {
	limits        bool
	partitionRate float64
	accountRate   float64
	faults        string
}

// register adds the flags to fs.
func (f *emulateFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.limits, "emulate-limits", false,
		"throttle as the service does: 503 ServerBusy past --partition-rate per partition or --account-rate per account, queries scanning at those rates; the hot partitions at /_tabula/hot (tabula inspect --hot)")
	fs.Float64Var(&f.partitionRate, "partition-rate", server.DefaultPartitionRate,
		"with --emulate-limits: entities per second one partition (account, table, PartitionKey) serves")
	fs.Float64Var(&f.accountRate, "account-rate", server.DefaultAccountRate,
		"with --emulate-limits: entities per second one account serves")
	fs.StringVar(&f.faults, "faults", "",
		`inject failures: "seed=7;insert:503=0.05,500=0.02;query:latency=50ms..200ms;reset=0.01;unavailable=orders/2024@10s" (docs/faults.md)`)
}

// options checks the flags fs parsed and turns them into the server's
// Limits and Faults (nil when off). The error names the flag, and the
// part of a --faults specification, that is wrong.
func (f *emulateFlags) options(fs *flag.FlagSet) (*server.Limits, *server.FaultSpec, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var limits *server.Limits
	for _, r := range []struct {
		name string
		v    float64
	}{{"partition-rate", f.partitionRate}, {"account-rate", f.accountRate}} {
		switch {
		case set[r.name] && !f.limits:
			return nil, nil, fmt.Errorf("--%s needs --emulate-limits", r.name)
		case !(r.v > 0) || math.IsInf(r.v, 0):
			return nil, nil, fmt.Errorf("--%s %v: want a positive number of entities per second", r.name, r.v)
		}
	}
	if f.limits {
		limits = &server.Limits{PartitionRate: f.partitionRate, AccountRate: f.accountRate}
		if err := limits.Validate(); err != nil { // the flags' checks above cover it; a guard against their drifting apart
			return nil, nil, fmt.Errorf("--emulate-limits: %w", err)
		}
	}
	var faults *server.FaultSpec
	if strings.TrimSpace(f.faults) != "" {
		spec, err := server.ParseFaultSpec(f.faults)
		if err != nil {
			return nil, nil, fmt.Errorf("--faults: %s", strings.TrimPrefix(err.Error(), "faults: "))
		}
		faults = spec
	}
	return limits, faults, nil
}

// announce logs what the server emulates: the limits, and the fault
// specification in its canonical form with the seed its faults are drawn
// with, so a run can be replayed.
func announce(log *slog.Logger, limits *server.Limits, faults *server.FaultSpec, srv *server.Server) {
	if limits != nil {
		log.Info("emulating the service's limits: 503 ServerBusy past them",
			"partition_rate", limits.PartitionRate, "account_rate", limits.AccountRate, "hot_view", server.HotPath)
	}
	if faults != nil {
		seed, ok := srv.FaultSeed()
		if !ok {
			log.Warn("--faults injects nothing", "spec", faults.String())
			return
		}
		log.Warn("injecting faults", "spec", faults.String(), "seed", seed)
	}
}
