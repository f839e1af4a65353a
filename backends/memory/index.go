package memory

import (
	"slices"
	"sort"
	"strings"

	"github.com/durable-go/durable/contract"
)

// The listing indexes. The record maps (workflows, keys, leases) stay the
// source of truth; beside them, each scope (and each scope and status or
// claimed key) has an idIndex of the IDs in byte order, so that a page of a
// listing costs O(log n + page) instead of a scan and a sort of the scope.
// Every path that adds or removes a record, or changes a workflow's status
// or a key's state, updates them under s.mu.

// idIndex is an ordered set of IDs, each with a value of type V: the
// workflow's record for the workflow indexes, so that a page of a listing
// reads its rows without a map lookup each (a record is updated in place,
// so the pointer stays valid for the record's life); nothing (struct{})
// for keys and leases, whose map values are replaced. It is a list of
// sorted chunks, each holding at most maxChunk entries, the chunks in
// order. Finding a position is two binary searches; an insert or delete
// moves at most one chunk's worth of entries (plus, on a split or merge,
// the chunk list).
type idIndex[V any] struct {
	chunks [][]idEntry[V] // each non-empty and sorted by id; chunks[i] < chunks[i+1]
	n      int
	spare  []idEntry[V] // the last chunk emptied, reused by the next insert
}

// idEntry is one ID of an index and its value. The value comes first, so
// that a zero-size one adds no padding.
type idEntry[V any] struct {
	v  V
	id string
}

func cmpEntry[V any](e idEntry[V], id string) int { return strings.Compare(e.id, id) }

// byID orders entries by ID.
func byID[V any](a, b idEntry[V]) int { return strings.Compare(a.id, b.id) }

const maxChunk = 256

// chunkFor returns the index of the first chunk whose last ID is >= id
// (len(x.chunks) if none).
func (x *idIndex[V]) chunkFor(id string) int {
	return sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1].id >= id
	})
}

// insert adds id with v, or, if id is present, makes its entry the string
// id itself (see Storage.putKey) and v; it reports whether id was absent.
func (x *idIndex[V]) insert(id string, v V) bool {
	e := idEntry[V]{v, id}
	if len(x.chunks) == 0 {
		c := x.spare
		if c == nil {
			c = make([]idEntry[V], 0, 8)
		}
		x.spare = nil
		x.chunks = append(x.chunks, append(c, e))
		x.n++
		return true
	}
	i := x.chunkFor(id)
	if i == len(x.chunks) {
		i-- // after every ID: append to the last chunk
	}
	c := x.chunks[i]
	j, found := slices.BinarySearchFunc(c, id, cmpEntry[V])
	if found {
		c[j] = e
		return false
	}
	c = slices.Insert(c, j, e)
	if len(c) > maxChunk {
		half := len(c) / 2
		right := append(make([]idEntry[V], 0, maxChunk), c[half:]...)
		clear(c[half:]) // drop the references the left half no longer holds
		c = c[:half]
		x.chunks = slices.Insert(x.chunks, i+1, right)
	}
	x.chunks[i] = c
	x.n++
	return true
}

// delete removes id; it reports whether id was present.
func (x *idIndex[V]) delete(id string) bool {
	i := x.chunkFor(id)
	if i == len(x.chunks) {
		return false
	}
	c := x.chunks[i]
	j, found := slices.BinarySearchFunc(c, id, cmpEntry[V])
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

// ascend calls fn with each ID greater than after, and its value, in
// order, until fn returns false.
func (x *idIndex[V]) ascend(after string, fn func(id string, v V) bool) {
	i := sort.Search(len(x.chunks), func(i int) bool {
		c := x.chunks[i]
		return c[len(c)-1].id > after
	})
	for ; i < len(x.chunks); i++ {
		c := x.chunks[i]
		j := 0
		if c[0].id <= after {
			j = sort.Search(len(c), func(k int) bool { return c[k].id > after })
		}
		for _, e := range c[j:] {
			if !fn(e.id, e.v) {
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
// group's index from build (the group's entries, read from the record
// map) and keeps it up to date from then on; until then add and remove
// skip the group. The listings of keys and leases are the operator's
// (durable inspect), which many stores never run, so their requests do not
// pay for an index nobody reads; a dropped empty index is built again when
// listed.
type indexSet[K comparable, V any] struct {
	m     map[K]*idIndex[V]
	build func(g K) []idEntry[V] // lazy: the entries of group g, in any order; nil: eager
}

const keepEmpty = 64

func (s *indexSet[K, V]) add(g K, id string, v V) {
	x := s.m[g]
	if x == nil {
		if s.build != nil {
			return // lazy, and not listed yet
		}
		x = &idIndex[V]{}
		s.m[g] = x
	}
	x.insert(id, v)
}

func (s *indexSet[K, V]) remove(g K, id string) {
	if x := s.m[g]; x != nil {
		x.delete(id)
		if x.n == 0 && len(s.m) > keepEmpty {
			delete(s.m, g)
		}
	}
}

// ascend calls fn with the IDs of group g after after, and their values,
// in order.
func (s *indexSet[K, V]) ascend(g K, after string, fn func(id string, v V) bool) {
	x := s.m[g]
	if x == nil && s.build != nil {
		x = indexOf(s.build(g))
		s.m[g] = x
	}
	if x != nil {
		x.ascend(after, fn)
	}
}

// indexOf returns the index of entries (of distinct IDs, in any order; it
// sorts them), its chunks half full so that inserts do not split at once.
func indexOf[V any](entries []idEntry[V]) *idIndex[V] {
	slices.SortFunc(entries, byID[V])
	x := &idIndex[V]{n: len(entries)}
	for len(entries) > 0 {
		n := min(len(entries), maxChunk/2)
		x.chunks = append(x.chunks, entries[:n:n])
		entries = entries[n:]
	}
	return x
}

type scopeStatus struct {
	scope  contract.Scope
	status contract.Status
}

// indexes are the listing indexes of a Storage, guarded by s.mu.
type indexes struct {
	workflows       indexSet[contract.Scope, *contract.Workflow]
	workflowsStatus indexSet[scopeStatus, *contract.Workflow]
	// keys, keysClaimed and leases are lazy (see indexSet). keysClaimed
	// holds only the claimed keys: claims are few and short lived, so a
	// listing of completed keys walks keys and skips them.
	keys        indexSet[contract.Scope, struct{}]
	keysClaimed indexSet[contract.Scope, struct{}]
	leases      indexSet[contract.Scope, struct{}]
}

// newIndexes returns the indexes of s; the lazy ones read s's maps when
// they build a group (under s.mu, like every use of the indexes).
func newIndexes(s *Storage) indexes {
	keysOf := func(claimedOnly bool) func(contract.Scope) []idEntry[struct{}] {
		return func(g contract.Scope) []idEntry[struct{}] {
			var ids []idEntry[struct{}]
			for k, r := range s.keys {
				if k.scope == g && (!claimedOnly || !r.completed) {
					ids = append(ids, idEntry[struct{}]{id: k.id})
				}
			}
			return ids
		}
	}
	return indexes{
		workflows:       indexSet[contract.Scope, *contract.Workflow]{m: map[contract.Scope]*idIndex[*contract.Workflow]{}},
		workflowsStatus: indexSet[scopeStatus, *contract.Workflow]{m: map[scopeStatus]*idIndex[*contract.Workflow]{}},
		keys:            indexSet[contract.Scope, struct{}]{m: map[contract.Scope]*idIndex[struct{}]{}, build: keysOf(false)},
		keysClaimed:     indexSet[contract.Scope, struct{}]{m: map[contract.Scope]*idIndex[struct{}]{}, build: keysOf(true)},
		leases: indexSet[contract.Scope, struct{}]{m: map[contract.Scope]*idIndex[struct{}]{}, build: func(g contract.Scope) []idEntry[struct{}] {
			var ids []idEntry[struct{}]
			for k := range s.leases {
				if k.scope == g {
					ids = append(ids, idEntry[struct{}]{id: k.id})
				}
			}
			return ids
		}},
	}
}

// The helpers below keep the maps and the indexes in step. s.mu must be held.

func (s *Storage) putWorkflow(k recKey, w *contract.Workflow) {
	s.workflows[k] = w
	s.idx.workflows.add(k.scope, k.id, w)
	s.idx.workflowsStatus.add(scopeStatus{k.scope, w.Status}, k.id, w)
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
	s.idx.workflowsStatus.add(scopeStatus{k.scope, st}, k.id, w)
}

// putKey stores r under its id in place of old, the record stored there if
// had (the caller has just looked it up). The map and the index entries of
// the key then hold r's strings, so that nothing keeps old's data alive.
func (s *Storage) putKey(old keyRec, had bool, r keyRec) {
	k := r.id()
	s.keys[k] = r // a map assignment replaces an equal string key too
	s.idx.keys.add(k.scope, k.id, struct{}{})
	switch {
	case !r.completed:
		s.idx.keysClaimed.add(k.scope, k.id, struct{}{})
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
// A new grant (putLease) and a deletion (deleteLease) signal the lease's
// watchers (watch.go).
func (s *Storage) putLease(k recKey, l *contract.Lease) {
	s.leases[k] = l
	s.idx.leases.add(k.scope, k.id, struct{}{})
	s.signalLease(k)
}

func (s *Storage) deleteLease(k recKey) bool {
	if _, ok := s.leases[k]; !ok {
		return false
	}
	delete(s.leases, k)
	s.idx.leases.remove(k.scope, k.id)
	s.signalLease(k)
	return true
}
