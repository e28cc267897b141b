package lsm

import (
	"github.com/tabuladb/tabula/internal/base"
)

// mergingIter merges child iterators into one stream in internal-key order
// (or its reverse), using a binary heap of the children positioned at an
// entry. It hides nothing: every version and tombstone of every child
// comes out. Key and Value alias the current child's.
type mergingIter struct {
	iters []base.InternalIterator
	// heap holds indexes of positioned children; heap[0] is current.
	heap    []int
	reverse bool
	err     error
}

func newMergingIter(iters []base.InternalIterator) *mergingIter {
	return &mergingIter{iters: iters, heap: make([]int, 0, len(iters))}
}

func (m *mergingIter) less(a, b int) bool {
	c := base.InternalCompare(m.iters[a].Key(), m.iters[b].Key())
	if m.reverse {
		return c > 0
	}
	return c < 0
}

func (m *mergingIter) down(i int) {
	n := len(m.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && m.less(m.heap[r], m.heap[l]) {
			j = r
		}
		if !m.less(m.heap[j], m.heap[i]) {
			return
		}
		m.heap[i], m.heap[j] = m.heap[j], m.heap[i]
		i = j
	}
}

// build makes a heap of the children whose positioning returned true.
func (m *mergingIter) build(reverse bool, position func(base.InternalIterator) bool) bool {
	m.reverse = reverse
	m.heap = m.heap[:0]
	m.err = nil
	for i, it := range m.iters {
		if position(it) {
			m.heap = append(m.heap, i)
		} else if err := it.Error(); err != nil {
			m.err = err
		}
	}
	if m.err != nil {
		m.heap = m.heap[:0]
		return false
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return len(m.heap) > 0
}

func (m *mergingIter) SeekGE(key []byte) bool {
	return m.build(false, func(it base.InternalIterator) bool { return it.SeekGE(key) })
}

func (m *mergingIter) SeekLT(key []byte) bool {
	return m.build(true, func(it base.InternalIterator) bool { return it.SeekLT(key) })
}

func (m *mergingIter) First() bool {
	return m.build(false, base.InternalIterator.First)
}

func (m *mergingIter) Last() bool {
	return m.build(true, base.InternalIterator.Last)
}

func (m *mergingIter) Next() bool {
	if len(m.heap) == 0 {
		return false
	}
	if m.reverse {
		return m.switchDirection(false)
	}
	return m.step(base.InternalIterator.Next)
}

func (m *mergingIter) Prev() bool {
	if len(m.heap) == 0 {
		return false
	}
	if !m.reverse {
		return m.switchDirection(true)
	}
	return m.step(base.InternalIterator.Prev)
}

// step advances the current child and restores the heap.
func (m *mergingIter) step(move func(base.InternalIterator) bool) bool {
	top := m.iters[m.heap[0]]
	if move(top) {
		m.down(0)
		return true
	}
	if err := top.Error(); err != nil {
		m.err = err
		m.heap = m.heap[:0]
		return false
	}
	last := len(m.heap) - 1
	m.heap[0] = m.heap[last]
	m.heap = m.heap[:last]
	m.down(0)
	return len(m.heap) > 0
}

// switchDirection repositions every child relative to the current key:
// going forward, at its first entry after the key; going backward, at its
// last entry before it.
func (m *mergingIter) switchDirection(reverse bool) bool {
	cur := m.Key().Clone()
	return m.build(reverse, func(it base.InternalIterator) bool {
		ok := it.SeekGE(cur.UserKey)
		for ok && base.InternalCompare(it.Key(), cur) < 0 {
			ok = it.Next()
		}
		if !reverse {
			// Now at the first entry >= cur; skip cur itself.
			if ok && base.InternalCompare(it.Key(), cur) == 0 {
				ok = it.Next()
			}
			return ok
		}
		if it.Error() != nil {
			return false
		}
		// Now at the first entry >= cur (or exhausted): the one before is
		// the last entry < cur.
		if ok {
			return it.Prev()
		}
		return it.Last()
	})
}

func (m *mergingIter) Key() base.InternalKey { return m.iters[m.heap[0]].Key() }

func (m *mergingIter) Value() []byte { return m.iters[m.heap[0]].Value() }

func (m *mergingIter) Error() error { return m.err }

func (m *mergingIter) Close() error {
	err := m.err
	for _, it := range m.iters {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}
	m.iters = nil
	m.heap = nil
	return err
}
