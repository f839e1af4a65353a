package memory

import (
	"slices"
	"sort"

	"github.com/durable-go/durable/contract"
)

// The listing indexes. The record maps (workflows, keys, leases) stay the
// source of truth; beside them, each scope (and each scope and status or
// claimed key) has an idIndex of the IDs in byte order, so that a page of a
// listing costs O(log n + page) instead of a scan and a sort of the scope.
// Every path that adds or removes a record, or changes a workflow's status
// or a key's state, updates them under s.mu.

// idIndex is an ordered set of strings: a list of sorted chunks, each
// holding at most maxChunk IDs, the chunks in order. Finding a position is
// two binary searches; an insert or delete moves at most one chunk's worth
// of IDs (plus, on a split or merge, the chunk list).
type idIndex struct {
	chunks [][]string // each non-empty and sorted; chunks[i] < chunks[i+1]
	n      int
	spare  []string // the last chunk emptied, reused by the next insert
}

const maxChunk = 256

// chunkFor returns the index of the first chunk whose last ID is >= id
// (len(x.chunks) if none).
func (x *idIndex) chunkFor(id string) int {
	return sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1] >= id
	})
}

// insert adds id; it reports whether id was absent.
func (x *idIndex) insert(id string) bool {
	if len(x.chunks) == 0 {
		c := x.spare
		if c == nil {
			c = make([]string, 0, 8)
		}
		x.spare = nil
		x.chunks = append(x.chunks, append(c, id))
		x.n++
		return true
	}
	i := x.chunkFor(id)
	if i == len(x.chunks) {
		i-- // after every ID: append to the last chunk
	}
	c := x.chunks[i]
	j, found := slices.BinarySearch(c, id)
	if found {
		return false
	}
	c = slices.Insert(c, j, id)
	if len(c) > maxChunk {
		half := len(c) / 2
		right := append(make([]string, 0, maxChunk), c[half:]...)
		clear(c[half:]) // drop the references the left half no longer holds
		c = c[:half]
		x.chunks = slices.Insert(x.chunks, i+1, right)
	}
	x.chunks[i] = c
	x.n++
	return true
}

// delete removes id; it reports whether id was present.
func (x *idIndex) delete(id string) bool {
	i := x.chunkFor(id)
	if i == len(x.chunks) {
		return false
	}
	c := x.chunks[i]
	j, found := slices.BinarySearch(c, id)
	if !found {
		return false
	}
	c = slices.Delete(c, j, j+1) // zeroes the freed slot
	x.n--
	switch {
	case len(c) == 0:
		if len(x.chunks) == 1 && cap(c) <= maxChunk {
			x.spare = c // a set that empties and fills again (claims) reuses it
		}
		x.chunks = slices.Delete(x.chunks, i, i+1)
		return true
	case len(c) < maxChunk/4 && i+1 < len(x.chunks) && len(c)+len(x.chunks[i+1]) <= maxChunk:
		// Merge a small chunk into its successor's place, so that deletes
		// do not leave a long list of tiny chunks.
		c = append(c, x.chunks[i+1]...)
		x.chunks = slices.Delete(x.chunks, i+1, i+2)
	}
	x.chunks[i] = c
	return true
}

// ascend calls fn with each ID greater than after, in order, until fn
// returns false.
func (x *idIndex) ascend(after string, fn func(id string) bool) {
	i := sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1] > after
	})
	for ; i < len(x.chunks); i++ {
		c := x.chunks[i]
		j := 0
		if c[0] <= after {
			j = sort.Search(len(c), func(k int) bool { return c[k] > after })
		}
		for _, id := range c[j:] {
			if !fn(id) {
				return
			}
		}
	}
}

// indexSet maps a group (a scope, or a scope and a status) to the index of
// its IDs. An index that empties stays while the set has at most
// keepEmpty groups (the claimed keys of a scope empty and fill again with
// each request), and is dropped beyond, so that scopes do not accumulate.
type indexSet[K comparable] map[K]*idIndex

const keepEmpty = 64

func (m indexSet[K]) add(g K, id string) {
	x := m[g]
	if x == nil {
		x = &idIndex{}
		m[g] = x
	}
	x.insert(id)
}

func (m indexSet[K]) remove(g K, id string) {
	if x := m[g]; x != nil {
		x.delete(id)
		if x.n == 0 && len(m) > keepEmpty {
			delete(m, g)
		}
	}
}

// ascend calls fn with the IDs of group g after after, in order.
func (m indexSet[K]) ascend(g K, after string, fn func(id string) bool) {
	if x := m[g]; x != nil {
		x.ascend(after, fn)
	}
}

type scopeStatus struct {
	scope  contract.Scope
	status contract.Status
}

// indexes are the listing indexes of a Storage, guarded by s.mu.
type indexes struct {
	workflows       indexSet[contract.Scope]
	workflowsStatus indexSet[scopeStatus]
	keys            indexSet[contract.Scope]
	// keysClaimed holds only the claimed keys: claims are few and short
	// lived, so a listing of completed keys walks keys and skips them,
	// and a request (claim, then complete) updates one large index and
	// one small one.
	keysClaimed indexSet[contract.Scope]
	leases      indexSet[contract.Scope]
}

func newIndexes() indexes {
	return indexes{
		workflows: indexSet[contract.Scope]{}, workflowsStatus: indexSet[scopeStatus]{},
		keys: indexSet[contract.Scope]{}, keysClaimed: indexSet[contract.Scope]{},
		leases: indexSet[contract.Scope]{},
	}
}

// The helpers below keep the maps and the indexes in step. s.mu must be held.

func (s *Storage) putWorkflow(k recKey, w *contract.Workflow) {
	s.workflows[k] = w
	s.idx.workflows.add(k.scope, k.id)
	s.idx.workflowsStatus.add(scopeStatus{k.scope, w.Status}, k.id)
}

func (s *Storage) deleteWorkflow(k recKey) bool {
	w, ok := s.workflows[k]
	if !ok {
		return false
	}
	delete(s.workflows, k)
	s.idx.workflows.remove(k.scope, k.id)
	s.idx.workflowsStatus.remove(scopeStatus{k.scope, w.Status}, k.id)
	return true
}

// setWorkflowStatus changes the status of the stored workflow w of key k.
func (s *Storage) setWorkflowStatus(k recKey, w *contract.Workflow, st contract.Status) {
	if w.Status == st {
		return
	}
	s.idx.workflowsStatus.remove(scopeStatus{k.scope, w.Status}, k.id)
	w.Status = st
	s.idx.workflowsStatus.add(scopeStatus{k.scope, st}, k.id)
}

// putKey stores r under k, replacing (and unindexing) any record there.
func (s *Storage) putKey(k recKey, r *keyRec) {
	if old, ok := s.keys[k]; ok && old.rec.State == contract.KeyClaimed {
		s.idx.keysClaimed.remove(k.scope, k.id)
	}
	s.keys[k] = r
	s.idx.keys.add(k.scope, k.id)
	if r.rec.State == contract.KeyClaimed {
		s.idx.keysClaimed.add(k.scope, k.id)
	}
}

func (s *Storage) deleteKey(k recKey) bool {
	r, ok := s.keys[k]
	if !ok {
		return false
	}
	delete(s.keys, k)
	s.idx.keys.remove(k.scope, k.id)
	if r.rec.State == contract.KeyClaimed {
		s.idx.keysClaimed.remove(k.scope, k.id)
	}
	return true
}

// setKeyState changes the state of the stored key record r of key k.
func (s *Storage) setKeyState(k recKey, r *keyRec, st contract.KeyState) {
	if r.rec.State == st {
		return
	}
	if r.rec.State == contract.KeyClaimed {
		s.idx.keysClaimed.remove(k.scope, k.id)
	}
	r.rec.State = st
	if st == contract.KeyClaimed {
		s.idx.keysClaimed.add(k.scope, k.id)
	}
}

// putLease stores l under k. A renewal that replaces the pointer of an
// existing lease may write s.leases directly: the set of IDs is unchanged.
func (s *Storage) putLease(k recKey, l *contract.Lease) {
	s.leases[k] = l
	s.idx.leases.add(k.scope, k.id)
}

func (s *Storage) deleteLease(k recKey) bool {
	if _, ok := s.leases[k]; !ok {
		return false
	}
	delete(s.leases, k)
	s.idx.leases.remove(k.scope, k.id)
	return true
}
