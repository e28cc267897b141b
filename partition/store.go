package partition

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/vfs"
)

// Options configures a Store. The zero value of every field means its
// default.
type Options struct {
	// LSM configures the engine. The store sets LSM.Split and LSM.DropKey
	// itself: whatever they hold is ignored.
	LSM lsm.Options
	// SplitBytes: a range partition larger than this splits. Default 512 MiB.
	SplitBytes int64
	// SplitOpsPerSecond: a range partition busier than this (reads plus
	// writes per second, smoothed) splits. Default 5000.
	SplitOpsPerSecond float64
	// MergeBytes: adjacent cold ranges merge when together smaller than
	// this. Default SplitBytes/4.
	MergeBytes int64
	// PageTimeout is the time budget of one query page. Default 5 s.
	PageTimeout time.Duration
	// Now is the clock of commit timestamps and time budgets. Default
	// time.Now.
	Now func() time.Time
	// TableCacheSize is how many tables the store keeps open in memory
	// (each its catalog entry, range map and statistics, about a KiB)
	// once they are not in use; the others are read from the catalog
	// when used (table_cache.go). Tables in use are never closed, so more
	// may be open for a while. Default 10,000.
	TableCacheSize int
	// SpanCacheSize is about how many range groups' span records the
	// store keeps in memory (span_cache.go): up to an eighth more between
	// sweeps. Default 10,000.
	SpanCacheSize int
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.SplitBytes <= 0 {
		r.SplitBytes = 512 << 20
	}
	if r.SplitOpsPerSecond <= 0 {
		r.SplitOpsPerSecond = 5000
	}
	if r.MergeBytes <= 0 {
		r.MergeBytes = r.SplitBytes / 4
	}
	if r.PageTimeout <= 0 {
		r.PageTimeout = 5 * time.Second
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.TableCacheSize <= 0 {
		r.TableCacheSize = 10000
	}
	if r.SpanCacheSize <= 0 {
		r.SpanCacheSize = 10000
	}
	return r
}

// Store is an open table service: accounts, their tables and entities, on
// one lsm.DB. All methods are safe for concurrent use.
type Store struct {
	db     *lsm.DB
	opts   Options
	tune   tuning
	syncWO *lsm.WriteOptions
	clock  *clock
	latch  *latches

	counters storeCounters // behind Stats and Ready

	// catMu serializes catalog edits (create and drop, id allocation)
	// and the opening and closing of tables (table_cache.go).
	catMu  sync.Mutex
	nextID uint64 // under catMu
	// tables maps tableKey to the open *table: looked up on every
	// operation, changed under catMu; open counts them.
	tables sync.Map
	open   int       // under catMu
	born   time.Time // when the store opened: the clock of table uses
	// groups maps a range group's id to the open *table whose catalog
	// entry names it; spans caches the groups' span records
	// (span_cache.go).
	groups  sync.Map
	spans   spanCache
	deleted atomic.Pointer[map[uint64]struct{}]

	// Maintenance state, owned by maintain (maintMu keeps a test's manual
	// ticks from overlapping the goroutine's).
	maintMu     sync.Mutex
	tick        atomic.Int64
	needRecount bool

	// ingestMu serializes span ingests (IngestSpan): two of one group
	// would share its staged pairs and marker, and ingests are rare
	// enough to run one at a time.
	ingestMu sync.Mutex

	dropMu      sync.Mutex
	dropCond    *sync.Cond
	dropQ       []droppedTable
	dropPending int
	dropSig     chan struct{}

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	errMu     sync.Mutex
	bgErr     error
}

// Open opens the store in dir, creating it if needed. A nil opts means
// defaults.
func Open(dir string, opts *Options) (*Store, error) {
	return open(dir, opts, defaultTuning())
}

func open(dir string, opts *Options, tune tuning) (*Store, error) {
	s := &Store{
		opts:    opts.withDefaults(),
		tune:    tune,
		syncWO:  &lsm.WriteOptions{Sync: true},
		latch:   newLatches(),
		dropSig: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		born:    time.Now(),
	}
	s.dropCond = sync.NewCond(&s.dropMu)
	s.spans.limit = s.opts.SpanCacheSize
	s.clock = &clock{now: s.opts.Now, saveLease: s.saveLease}
	lo := s.opts.LSM
	if lo.InitialMemTableSize == 0 {
		// A server owns the memory it is given: starting at the full
		// memtable size keeps a table of a few tens of MiB in the
		// memtable, where the REST suite's scan of one ran a fifth faster
		// than from tables.
		lo.InitialMemTableSize = -1
	}
	lo.Split = PrefixLen
	lo.DropKey = s.dropKey
	fs := lo.FS
	if fs == nil {
		fs = vfs.Default()
	}
	if _, err := fs.Stat(filepath.Join(dir, restoringMarker)); err == nil {
		return nil, fmt.Errorf("partition: open %s: a restore into it was interrupted; remove the directory's files and restore again", dir)
	}
	db, err := lsm.Open(dir, &lo)
	if err != nil {
		return nil, fmt.Errorf("partition: open %s: %w", dir, err)
	}
	s.db = db
	drops, err := s.loadCatalog()
	if err == nil {
		err = s.markRunning()
	}
	if err == nil {
		// Before the ingests are finished: the parts of a span an ingest
		// gives up are found from the span records (spansGivenUp).
		err = s.loadSpans()
	}
	if err == nil {
		// Before anything is served: a span ingest cut by a crash after
		// its stream checked out is finished, so no read sees half of it.
		err = s.finishSpanIngests()
	}
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	for _, d := range drops {
		s.queueDrop(d)
	}
	s.wg.Add(1)
	go s.reclaim()
	if tune.tick > 0 {
		s.wg.Add(1)
		go s.run()
	}
	return s, nil
}

// markRunning records that the store is open; finding the record at Open
// means the last run crashed and the persisted statistics are stale.
func (s *Store) markRunning() error {
	switch _, err := s.db.Get(metaKey(metaRunning)); {
	case err == nil:
		s.needRecount = true
	case !errors.Is(err, lsm.ErrNotFound):
		return fmt.Errorf("partition: read run marker: %w", err)
	}
	if err := s.db.Set(metaKey(metaRunning), nil, s.syncWO); err != nil {
		return fmt.Errorf("partition: write run marker: %w", err)
	}
	return nil
}

func (s *Store) saveLease(ts odata.DateTime) error {
	if err := s.db.Set(metaKey(metaClock), appendUint64(nil, uint64(ts)), s.syncWO); err != nil {
		return fmt.Errorf("partition: persist clock lease: %w", err)
	}
	return nil
}

// DB returns the engine under the store, for metrics. Writing to it
// directly bypasses the table service's invariants.
func (s *Store) DB() *lsm.DB { return s.db }

// Close stops background work, persists the range statistics and the
// clock, and closes the engine. Queries and writes must have returned.
// It reports any failure of background work since Open.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.counters.closed.Store(true)
		close(s.stop)
		s.wg.Wait()
		var errs []error
		tables := s.openTables()
		errs = append(errs, s.persistRanges(tables))
		releaseAll(tables)
		if !s.needRecount {
			// Counts are exact: the next Open need not recount.
			if err := s.db.Delete(metaKey(metaRunning), s.syncWO); err != nil {
				errs = append(errs, fmt.Errorf("partition: clear run marker: %w", err))
			}
		}
		if err := s.saveLease(s.clock.lastIssued()); err != nil {
			errs = append(errs, err)
		}
		s.errMu.Lock()
		errs = append(errs, s.bgErr)
		s.errMu.Unlock()
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("partition: close engine: %w", err))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func appendUint64(dst []byte, v uint64) []byte {
	return append(dst, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
