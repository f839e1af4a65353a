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

// insert adds id, or makes an equal ID present the string id itself; it
// reports whether id was absent.
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
		c[j] = id // the caller's copy: see Storage.putKey
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
//
// An eager set (build nil) indexes every group as its records come. A lazy
// set indexes a group only from its first listing on: ascend builds the
// group's index from build (the group's IDs, read from the record map) and
// keeps it up to date from then on; until then add and remove skip the
// group. The listings of keys and leases are the operator's (durable
// inspect), which many stores never run, so their requests do not pay for
// an index nobody reads; a dropped empty index is built again when listed.
type indexSet[K comparable] struct {
	m     map[K]*idIndex
	build func(g K) []string // lazy: the IDs of group g, in any order; nil: eager
}

const keepEmpty = 64

func (s *indexSet[K]) add(g K, id string) {
	x := s.m[g]
	if x == nil {
		if s.build != nil {
			return // lazy, and not listed yet
		}
		x = &idIndex{}
		s.m[g] = x
	}
	x.insert(id)
}

func (s *indexSet[K]) remove(g K, id string) {
	if x := s.m[g]; x != nil {
		x.delete(id)
		if x.n == 0 && len(s.m) > keepEmpty {
			delete(s.m, g)
		}
	}
}

// ascend calls fn with the IDs of group g after after, in order.
func (s *indexSet[K]) ascend(g K, after string, fn func(id string) bool) {
	x := s.m[g]
	if x == nil && s.build != nil {
		x = indexOf(s.build(g))
		s.m[g] = x
	}
	if x != nil {
		x.ascend(after, fn)
	}
}

// indexOf returns the index of ids (distinct, in any order; it sorts
// them), its chunks half full so that inserts do not split at once.
func indexOf(ids []string) *idIndex {
	slices.Sort(ids)
	x := &idIndex{n: len(ids)}
	for len(ids) > 0 {
		n := min(len(ids), maxChunk/2)
		x.chunks = append(x.chunks, ids[:n:n])
		ids = ids[n:]
	}
	return x
}

type scopeStatus struct {
	scope  contract.Scope
	status contract.Status
}

// indexes are the listing indexes of a Storage, guarded by s.mu.
type indexes struct {
	workflows       indexSet[contract.Scope]
	workflowsStatus indexSet[scopeStatus]
	// keys, keysClaimed and leases are lazy (see indexSet). keysClaimed
	// holds only the claimed keys: claims are few and short lived, so a
	// listing of completed keys walks keys and skips them.
	keys        indexSet[contract.Scope]
	keysClaimed indexSet[contract.Scope]
	leases      indexSet[contract.Scope]
}

// newIndexes returns the indexes of s; the lazy ones read s's maps when
// they build a group (under s.mu, like every use of the indexes).
func newIndexes(s *Storage) indexes {
	keysOf := func(claimedOnly bool) func(contract.Scope) []string {
		return func(g contract.Scope) []string {
			var ids []string
			for k, r := range s.keys {
				if k.scope == g && (!claimedOnly || !r.completed) {
					ids = append(ids, k.id)
				}
			}
			return ids
		}
	}
	return indexes{
		workflows:       indexSet[contract.Scope]{m: map[contract.Scope]*idIndex{}},
		workflowsStatus: indexSet[scopeStatus]{m: map[scopeStatus]*idIndex{}},
		keys:            indexSet[contract.Scope]{m: map[contract.Scope]*idIndex{}, build: keysOf(false)},
		keysClaimed:     indexSet[contract.Scope]{m: map[contract.Scope]*idIndex{}, build: keysOf(true)},
		leases: indexSet[contract.Scope]{m: map[contract.Scope]*idIndex{}, build: func(g contract.Scope) []string {
			var ids []string
			for k := range s.leases {
				if k.scope == g {
					ids = append(ids, k.id)
				}
			}
			return ids
		}},
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

// putKey stores r under its id in place of old, the record stored there if
// had (the caller has just looked it up). The map and the index entries of
// the key then hold r's strings, so that nothing keeps old's data alive.
func (s *Storage) putKey(old keyRec, had bool, r keyRec) {
	k := r.id()
	s.keys[k] = r // a map assignment replaces an equal string key too
	s.idx.keys.add(k.scope, k.id)
	switch {
	case !r.completed:
		s.idx.keysClaimed.add(k.scope, k.id)
	case had && !old.completed:
		s.idx.keysClaimed.remove(k.scope, k.id)
	}
}

func (s *Storage) deleteKey(k recKey) bool {
	r, ok := s.keys[k]
	if !ok {
		return false
	}
	delete(s.keys, k)
	s.idx.keys.remove(k.scope, k.id)
	if !r.completed {
		s.idx.keysClaimed.remove(k.scope, k.id)
	}
	return true
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
