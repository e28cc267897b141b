package cluster

import (
	"maps"
	"sync"
	"time"

	"github.com/tabuladb/tabula/internal/shrink"
)

// recentNames are the range groups whose voters were named lately, by
// the placement controller or an operator, with when: the times the
// node applied the system group's KindSetRangeVoters entries. The
// controller leaves a group named within its settle window alone, so
// that an operator's move stays while another group can go, and moves
// the group named longest ago first. Every node keeps them from its
// apply, so a controller newly elected knows the names made before it;
// and a name older than the window is forgotten, so a node holds the
// names of one window, not an entry per group of the cluster.
type recentNames struct {
	window time.Duration // 0: nothing is kept (no controller runs)

	mu   sync.Mutex
	at   map[uint64]time.Time
	peak int // see shrink.Map
}

// note records that group's voters were named at now. It runs on the
// apply goroutine.
func (r *recentNames) note(group uint64, now time.Time) {
	if r.window <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(now)
	if r.at == nil {
		r.at = map[uint64]time.Time{}
	}
	r.at[group] = now
}

// since returns the groups named within the window before now, with
// when; the others were named longer ago, or never.
func (r *recentNames) since(now time.Time) map[uint64]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(now)
	return maps.Clone(r.at)
}

// forgetLocked forgets the names older than the window.
func (r *recentNames) forgetLocked(now time.Time) {
	for g, t := range r.at {
		if now.Sub(t) > r.window {
			delete(r.at, g)
		}
	}
	r.at = shrink.Map(r.at, &r.peak)
}
