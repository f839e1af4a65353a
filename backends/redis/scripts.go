package redis

import (
	"regexp"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua scripts. Every operation is one of them, run with EVALSHA (and
// EVAL when the server answers NOSCRIPT: after a restart or SCRIPT
// FLUSH), so each is one atomic step on the node that owns the scope's
// slot. KEYS[1] is always a key of the scope (the record's own key), so
// that a cluster routes the script to that slot; ARGV[1] is the scope's
// key base "<prefix>:{<tag>}:", from which the script names the scope's
// other keys (all in the same slot, by the hash tag).
//
// Times are integers of microseconds since the Unix epoch (0 is the zero
// time), exact in Lua's doubles until the year 2255. ARGV[2] is the time
// the client's test clock gives, or "" for the server's own clock (TIME).

// The helpers scripts share. Each script carries only the ones it uses
// (script adds them): Redis runs a script's whole text on every call, so
// a helper a script does not need still costs the time to define it.
// Order matters: a helper may use the ones before it.
var helpers = []helper{
	{"clock", `
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end`},
	{"f", `
local function f(n) return string.format('%.0f', n) end`},
	{"num", `
local function num(s) if not s then return 0 end return tonumber(s) end`},
	{"cat", `
local function cat(a, b) for _, x in ipairs(b) do a[#a + 1] = x end return a end`},
	{"terminal", `
local function terminal(s) return s == 'succeeded' or s == 'failed' or s == 'closed' end`},
	// internal/claimrule's rule, line by line: the first line whose
	// facts hold decides (has: all of these bits; lacks: none of these).
	{"decide", `
local FOUND, LIVE, LAPSED, MATCH, COMPLETED, EXPIRED, OWN = 1, 2, 4, 8, 16, 32, 64
local RULE = {
  {0, FOUND, 'New'},
  {0, LIVE, 'New'},
  {0, MATCH, 'Conflict'},
  {COMPLETED + EXPIRED, 0, 'Gone'},
  {COMPLETED, 0, 'Replay'},
  {OWN, 0, 'Held'},
  {0, LAPSED, 'InFlight'},
  {0, 0, 'Reclaim'},
}
local function decide(facts)
  for _, l in ipairs(RULE) do
    if bit.band(facts, l[1]) == l[1] and bit.band(facts, l[2]) == 0 then return l[3] end
  end
end`},
	{"wf_reply", `
local function wf_reply(k)
  local v = redis.call('HMGET', k, 's', 'r', 'v', 'd', 'c', 'u')
  return {v[1] or '', v[2] or '', v[3] or '', v[4] or '', v[5] or '', v[6] or ''}
end`},
	{"keyrec", `
local function keyrec(k)
  local v = redis.call('HMGET', k, 'f', 'w', 't', 'st', 'lu', 'c', 'ca', 'ea', 'fa', 'oc', 'o')
  if not v[1] then return nil end
  return {f = v[1], w = v[2] or '', t = v[3] or '', st = v[4] or '', lu = num(v[5]), c = num(v[6]),
    ca = num(v[7]), ea = num(v[8]), fa = num(v[9]), oc = v[10] or '0', o = v[11]}
end`},
	{"key_live", `
local function key_live(r, now) return r.st ~= 'd' or now < r.fa end`},
	{"key_expired", `
local function key_expired(r, now) return r.st == 'd' and r.ea <= now end`},
	// key_reply: fingerprint, workflow id, state, leaseUntil, createdAt,
	// completedAt, expiresAt, forgetAt, code, outcome ('' unless
	// completed), whether the outcome is there ('1'/'0'). A claim's state
	// is 'c'.
	{"key_reply", `
local function key_reply(r, now)
  local state, lu, o, has = 'claimed', r.lu, '', '0'
  if r.st == 'd' then
    lu = 0
    if r.ea <= now then state = 'expired' else state = 'completed' end
  elseif r.st ~= 'c' then
    state = 'corrupt'
  end
  if state == 'completed' then
    if r.o then o, has = r.o, '1' else state = 'corrupt' end
  end
  return {r.f, r.w, state, f(lu), f(r.c), f(r.ca), f(r.ea), f(r.fa), r.oc, o, has}
end`},
	{"drop_key", `
local function drop_key(key)
  redis.call('DEL', base .. 'k:' .. key)
  for _, i in ipairs({'i:k', 'i:kc', 'i:kx', 'i:kf', 'i:ke'}) do redis.call('ZREM', base .. i, key) end
end`},
	{"drop_wf", `
local function drop_wf(id)
  local k = base .. 'w:' .. id
  local s = redis.call('HGET', k, 's')
  if not s then return 0 end
  redis.call('DEL', k)
  redis.call('ZREM', base .. 'i:w', id)
  redis.call('ZREM', base .. 'i:w:' .. s, id)
  redis.call('ZREM', base .. 'i:wt', id)
  return 1
end`},
	{"wake", `
local function wake(key) redis.call('PUBLISH', base .. 'c:' .. key, '1') end`},
	// lwake signals the watchers of token resource tr's leases (the
	// resource and its permits), if any: WatchLease keeps the mark
	// P:{sS}:m:TR alive while it watches, so a grant or release of a
	// lease nobody watches publishes nothing. The grant (grantLua) and
	// leaseRelease, the hot path of a lock, have its two lines inline
	// instead (a Lua function costs its definition on every run).
	{"lwake", `
local function lwake(tr)
  if redis.call('EXISTS', base .. 'm:' .. tr) == 1 then redis.call('PUBLISH', base .. 'h:' .. tr, '1') end
end`},
	// tokres is contract.TokenResource: a permit's "R#n" (R without "#",
	// n from 1 to 1000 in decimal without a leading zero) gives R, any
	// other resource itself. TestTokresMatchesContract checks it against
	// the Go function.
	{"tokres", `
local function tokres(res)
  local r, n = string.match(res, '^([^#]+)#([1-9]%d*)$')
  if r and tonumber(n) <= 1000 then return r end
  return res
end`},
	// A lease record P:{sS}:l:RES is one string, lpack's: a format byte
	// (1), the token, acquired and expires times (doubles: exact integers
	// up to 2^53), then owner, request id and value, each a 4-byte length
	// and its bytes. A released lease leaves a tombstone, the empty
	// string, until Cleanup or DeleteRecord removes it with its index
	// entry: a string record (live or tombstone) is always in the lease
	// index i:l, so a grant that finds one writes no index entry. A
	// record written as a hash by an earlier version (fields o t a e n v)
	// is read as well: MGET answers nil for a hash, so a reader that finds
	// nil asks HMGET before it takes the resource as free, and the first
	// write turns the hash into a string. lrec reads any of the three
	// forms; the hot paths (grant, release, renewal) have it inline.
	{"LFMT", `
local LFMT = '>BdddI4c0I4c0I4c0'`},
	{"lpack", `
local function lpack(t, a, e, o, n, v) return struct.pack(LFMT, 1, t, a, e, #o, o, #n, n, #v, v) end`},
	// lrec(k): nil when there is no lease (no record or a tombstone), else
	// owner, token, acquired, expires (numbers), request id, value; and
	// whether the record was a legacy hash (then the resource may have no
	// string form yet, and a write must keep its index entry: it has one).
	{"lrec", `
local function lrec(k)
  local s = redis.call('MGET', k)[1]
  if s then
    if s == '' then return nil end
    local _, t, a, e, o, n, v = struct.unpack(LFMT, s)
    return {o = o, t = t, a = a, e = e, n = n, v = v}
  end
  local h = redis.call('HMGET', k, 'o', 't', 'a', 'e', 'n', 'v')
  if not h[1] then return nil end
  return {o = h[1], t = num(h[2]), a = num(h[3]), e = num(h[4]), n = h[5] or '', v = h[6] or ''}
end`},
	// drop_lease removes a lease's record (a tombstone too) and its index
	// entry; 1 if there was a lease (not a tombstone), else 0.
	{"drop_lease", `
local function drop_lease(res)
  local k, n = base .. 'l:' .. res, 0
  if lrec(k) then n = 1 end
  redis.call('DEL', k)
  redis.call('ZREM', base .. 'i:l', res)
  return n
end`},
	// The token is compared as the decimal string the caller sent (f of a
	// double below 2^53 is exact), so no token string rounds onto another.
	{"fence_ok", `
local function fence_ok(res, owner, tok, now, tol)
  local l = lrec(base .. 'l:' .. res)
  return l ~= nil and l.o == owner and f(l.t) == tok and l.e > now + tol
end`},
}

// helper is one shared Lua function (or, for decide, the claim rule's
// table and function), named by the identifier scripts call it by.
type helper struct{ name, code string }

var identifier = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// script builds a script from body: ARGV[1] as base (every script's first
// argument), then the helpers body uses, directly or through another
// helper, in the order of helpers.
func script(body string) *goredis.Script {
	used := map[string]bool{}
	var mark func(code string)
	mark = func(code string) {
		for _, id := range identifier.FindAllString(code, -1) {
			for _, h := range helpers {
				if h.name == id && !used[id] {
					used[id] = true
					mark(h.code)
				}
			}
		}
	}
	mark(body)
	var b strings.Builder
	b.WriteString("local base = ARGV[1]")
	for _, h := range helpers {
		if used[h.name] {
			b.WriteString(h.code)
		}
	}
	b.WriteString("\n")
	b.WriteString(body)
	return goredis.NewScript(b.String())
}

// ARGV: base, now, id, status, request id, snapshot, nonce.
var wfCreate = script(`
local k = KEYS[1]
if redis.call('EXISTS', k) == 1 then
  if ARGV[7] ~= '' and redis.call('HGET', k, 'n') == ARGV[7] then return cat({'ok'}, wf_reply(k)) end
  return {'exists'}
end
local now = clock(ARGV[2])
redis.call('HSET', k, 's', ARGV[4], 'r', ARGV[5], 'v', '1', 'd', ARGV[6], 'c', f(now), 'u', f(now), 'n', ARGV[7])
redis.call('ZADD', base .. 'i:w', 0, ARGV[3])
redis.call('ZADD', base .. 'i:w:' .. ARGV[4], 0, ARGV[3])
if terminal(ARGV[4]) then redis.call('ZADD', base .. 'i:wt', f(now), ARGV[3]) end
return cat({'ok'}, wf_reply(k))
`)

// ARGV: base, now.
var wfGet = script(`
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return {'notfound'} end
return cat({'ok'}, wf_reply(k))
`)

// ARGV: base, now, id, expect status, expect revision, fence resource,
// fence owner, fence token, tolerance, status, request id, snapshot, nonce.
var wfUpdate = script(`
local k = KEYS[1]
local cur = redis.call('HMGET', k, 's', 'v', 'n')
if not cur[1] then return {'notfound'} end
if ARGV[13] ~= '' and cur[3] == ARGV[13] then return cat({'ok'}, wf_reply(k)) end
if terminal(cur[1]) then
  if ARGV[10] == cur[1] then return cat({'ok'}, wf_reply(k)) end
  return {'terminal'}
end
local now = clock(ARGV[2])
if ARGV[6] ~= '' and not fence_ok(ARGV[6], ARGV[7], ARGV[8], now, tonumber(ARGV[9])) then return {'fenced'} end
if cur[1] ~= ARGV[4] or (ARGV[5] ~= '0' and cur[2] ~= ARGV[5]) then return {'conflict', cur[1], cur[2] or ''} end
redis.call('HSET', k, 's', ARGV[10], 'r', ARGV[11], 'v', f(tonumber(cur[2]) + 1), 'd', ARGV[12], 'u', f(now), 'n', ARGV[13])
if cur[1] ~= ARGV[10] then
  redis.call('ZREM', base .. 'i:w:' .. cur[1], ARGV[3])
  redis.call('ZADD', base .. 'i:w:' .. ARGV[10], 0, ARGV[3])
end
if terminal(ARGV[10]) then redis.call('ZADD', base .. 'i:wt', f(now), ARGV[3]) end
return cat({'ok'}, wf_reply(k))
`)

// ARGV: base, now, key, fingerprint, workflow id, ttl, token, tolerance.
// Replies: kind, token, key_reply…
var keyClaim = script(`
local k, key = KEYS[1], ARGV[3]
local now = clock(ARGV[2])
local ttl, tol = tonumber(ARGV[6]), tonumber(ARGV[8])
local r = keyrec(k)
local facts = 0
if r then
  local claimed = r.st ~= 'd'
  facts = FOUND
  if key_live(r, now) then facts = facts + LIVE end
  if claimed and r.lu + tol < now then facts = facts + LAPSED end
  if r.f == ARGV[4] and (ARGV[5] == '' or ARGV[5] == r.w) then facts = facts + MATCH end
  if not claimed then facts = facts + COMPLETED end
  if key_expired(r, now) then facts = facts + EXPIRED end
  if claimed and r.t == ARGV[7] then facts = facts + OWN end
end
local d = decide(facts)
if d == 'Conflict' then return {'conflict'} end
if d == 'Gone' then return {'gone'} end
if d == 'Replay' then return cat({'completed', ''}, key_reply(r, now)) end
if d == 'InFlight' then return cat({'inflight', ''}, key_reply(r, now)) end
local lu = now + ttl
if d == 'Held' or d == 'Reclaim' then
  redis.call('HSET', k, 't', ARGV[7], 'lu', f(lu))
  redis.call('ZADD', base .. 'i:kx', f(lu), key)
  r.t, r.lu = ARGV[7], lu
  local kind = 'reclaimed'
  if d == 'Held' then kind = 'new' end
  return cat({kind, ARGV[7]}, key_reply(r, now))
end
if r then drop_key(key) end
redis.call('HSET', k, 'f', ARGV[4], 'w', ARGV[5], 't', ARGV[7], 'st', 'c', 'lu', f(lu), 'c', f(now))
redis.call('ZADD', base .. 'i:k', 0, key)
redis.call('ZADD', base .. 'i:kc', 0, key)
redis.call('ZADD', base .. 'i:kx', f(lu), key)
return cat({'new', ARGV[7]}, key_reply(keyrec(k), now))
`)

// tokresScript runs the Lua tokres alone, for the test that checks it
// against contract.TokenResource. ARGV: base, resource.
var tokresScript = script(`return tokres(ARGV[2])`)

// decideScript runs the Lua claim rule alone, for the test that checks it
// against internal/claimrule. ARGV: base, facts.
var decideScript = script(`return decide(tonumber(ARGV[2]))`)

// ARGV: base, now, key, token, outcome, code, retain, tombstone, fence
// resource, fence owner, fence token, tolerance.
var keyComplete = script(`
local k, key = KEYS[1], ARGV[3]
local now = clock(ARGV[2])
local r = keyrec(k)
if not r or not key_live(r, now) or r.t ~= ARGV[4] then return {'fencedkey'} end
if r.st == 'd' then return cat({'ok'}, key_reply(r, now)) end
if ARGV[9] ~= '' and not fence_ok(ARGV[9], ARGV[10], ARGV[11], now, tonumber(ARGV[12])) then return {'fenced'} end
local retain = tonumber(ARGV[7])
local ea, fa = now + retain, now + math.max(retain, tonumber(ARGV[8]))
redis.call('HSET', k, 'st', 'd', 'ca', f(now), 'ea', f(ea), 'fa', f(fa), 'oc', ARGV[6], 'o', ARGV[5])
redis.call('HDEL', k, 'lu')
redis.call('ZREM', base .. 'i:kc', key)
redis.call('ZREM', base .. 'i:kx', key)
redis.call('ZADD', base .. 'i:kf', f(fa), key)
redis.call('ZADD', base .. 'i:ke', f(ea), key)
wake(key)
return cat({'ok'}, key_reply(keyrec(k), now))
`)

// ARGV: base, now, key, token, ttl.
var keyRenew = script(`
local k, key = KEYS[1], ARGV[3]
local r = keyrec(k)
if not r or r.st ~= 'c' or r.t ~= ARGV[4] then return {'fencedkey'} end
local now = clock(ARGV[2])
r.lu = now + tonumber(ARGV[5])
redis.call('HSET', k, 'lu', f(r.lu))
redis.call('ZADD', base .. 'i:kx', f(r.lu), key)
return cat({'ok'}, key_reply(r, now))
`)

// ARGV: base, now, key, token.
var keyRelease = script(`
local r = keyrec(KEYS[1])
if not r or r.st ~= 'c' or r.t ~= ARGV[4] then return 0 end
drop_key(ARGV[3])
wake(ARGV[3])
return 1
`)

// ARGV: base, now.
var keyGet = script(`
local now = clock(ARGV[2])
local r = keyrec(KEYS[1])
if not r or not key_live(r, now) then return {'notfound'} end
return cat({'ok'}, key_reply(r, now))
`)

// grantLua grants the lease k on res, replacing a record whose token is
// prev (0 when there is none), to ARGV's owner (4) for its ttl (5), with
// its request id (7) and value (8), and a token from the counter ctr of
// token resource ARGV[9]; it leaves the token and expiry (numbers) in tok
// and e. leaseAcquire and permitAcquire have it inline (a Lua function
// costs its definition on every run): the surrounding script defines k,
// ctr, res, prev and now, idx (true when the resource may have no index
// entry yet: no string record was there) and mark (true when somebody
// watches ARGV[9]'s leases).
//
// The counter is never deleted (not by release, Cleanup nor
// DeleteRecord), so every grant's token is above every token the token
// resource had before. Should it nevertheless be below prev (a counter
// lost while the lease survived), the grant goes past prev instead. Lua
// numbers are doubles, exact only up to 2^53: a counter or a prev at 2^53
// grants nothing ('exhausted'), so no token is rounded into a repeat. The
// counter is INCRed first and read (GET, exactly, as a string) only when
// the INCR's reply, rounded to a double, reaches 2^53: then anything but
// exactly 2^53 is undone (DECR) and refused. One call fewer per grant than
// reading it before.
const grantLua = `
if prev >= 9007199254740992 then return {'exhausted'} end
local tok = redis.call('INCR', ctr)
if tok >= 9007199254740992 and redis.call('GET', ctr) ~= '9007199254740992' then
  redis.call('DECR', ctr)
  return {'exhausted'}
end
if tok <= prev then
  tok = prev + 1
  redis.call('SET', ctr, string.format('%.0f', tok))
end
local e = now + tonumber(ARGV[5])
redis.call('SET', k, struct.pack(LFMT, 1, tok, now, e, #ARGV[4], ARGV[4], #ARGV[7], ARGV[7], #ARGV[8], ARGV[8]))
if idx then redis.call('ZADD', base .. 'i:l', 0, res) end
if mark then redis.call('PUBLISH', base .. 'h:' .. ARGV[9], '1') end
`

// ARGV: base, now, resource, owner, ttl, tolerance, request id, value,
// token resource (contract.TokenResource of the resource). KEYS[2] is the
// token resource's counter P:{sS}:t:TR (same hash tag, so the same slot):
// the grant INCRs it in this script, so a grant is one script on one
// node and on a cluster alike, and a semaphore's permits "R#n" and a
// plain lease on R draw from one counter. The record and the watch mark
// are read in one MGET (nil for a record still in the legacy hash form:
// then HMGET reads it). Reply: 'ok', token, acquired, expires (the
// owner and value are the request's: a reply that finds the request's
// own earlier grant, by its request id, has the same); or 'busy', or
// 'exhausted' (see grantLua).
var leaseAcquire = script(`
local k, ctr, res = KEYS[1], KEYS[2], ARGV[3]
local now = clock(ARGV[2])
local g = redis.call('MGET', k, base .. 'm:' .. ARGV[9])
local s, mark, prev, idx = g[1], g[2], 0, false
local o, t, a, e0, n, v, _
if s then
  if s ~= '' then _, t, a, e0, o, n, v = struct.unpack(LFMT, s) end
else
  idx = true
  local h = redis.call('HMGET', k, 'o', 't', 'a', 'e', 'n', 'v')
  o, t, a, e0, n, v = h[1], tonumber(h[2]), tonumber(h[3]) or 0, tonumber(h[4]), h[5], h[6] or ''
end
if o then
  if ARGV[7] ~= '' and n == ARGV[7] then return {'ok', t, a, e0} end
  if not (e0 + tonumber(ARGV[6]) < now) then return {'busy'} end
  prev = t
end` + grantLua + `
return {'ok', tok, now, e}
`)

// permitAcquire is contract.PermitAcquirer in one script. ARGV: as
// leaseAcquire's, with the semaphore's resource R as the resource and
// the token resource, then the number of permits. KEYS[1] is R's counter
// P:{sS}:t:R; every permit's record P:{sS}:l:R#n is in the same slot. It
// reads permits 1, 2, … in turn and grants the first that AcquireLease
// would grant (no record, or one expired more than the tolerance ago),
// exactly as leaseAcquire does. A retried request finds its own grant
// among the permits it reads before a free one. Reply: 'ok', the
// permit's resource, owner, token, acquired, expires, value; or 'busy'
// (every permit held), or 'exhausted'.
var permitAcquire = script(`
local ctr, tol = KEYS[1], tonumber(ARGV[6])
local now = clock(ARGV[2])
local k, res, prev
for i = 1, tonumber(ARGV[10]) do
  local r = ARGV[3] .. '#' .. i
  local rk = base .. 'l:' .. r
  local l = lrec(rk)
  if l and ARGV[7] ~= '' and l.n == ARGV[7] then return {'ok', r, l.o, l.t, l.a, l.e, l.v} end
  if not l or l.e + tol < now then
    k, res, prev = rk, r, 0
    if l then prev = l.t end
    break
  end
end
if not k then return {'busy'} end
local idx, mark = true, redis.call('EXISTS', base .. 'm:' .. ARGV[9]) == 1` + grantLua + `
return {'ok', res, ARGV[4], tok, now, e, ARGV[8]}
`)

// ARGV: base, now, ttl, tolerance, then resource, owner, token for each
// lease. Reply: per lease, 'ok' or 'fenced', owner, token, acquired,
// expires, value. A renewal keeps the value and signals no watcher.
var leaseRenew = script(`
local now = clock(ARGV[2])
local e = now + tonumber(ARGV[3])
local tol = tonumber(ARGV[4])
local out = {}
for i = 5, #ARGV, 3 do
  local k = base .. 'l:' .. ARGV[i]
  local l = lrec(k)
  if not l or l.o ~= ARGV[i + 1] or f(l.t) ~= ARGV[i + 2] or not (l.e > now + tol) then
    cat(out, {'fenced', '', '', '', '', ''})
  else
    redis.call('SET', k, lpack(l.t, l.a, e, l.o, l.n, l.v))
    cat(out, {'ok', l.o, l.t, l.a, e, l.v})
  end
end
return out
`)

// ARGV: base, now, resource, owner, token, token resource. The token is
// canonical decimal below 2^53 (ReleaseLease sends no other), so its
// number compares exactly. A release leaves a tombstone (the empty
// string) and the resource's entry in the lease index i:l: the hot path
// of a lock taken and released over and over then writes one key per
// grant and one per release; readers (listing, Cleanup) skip tombstones,
// and Cleanup removes them with their entries.
var leaseRelease = script(`
local g = redis.call('MGET', KEYS[1], base .. 'm:' .. ARGV[6])
local s, o, t, _ = g[1]
if s then
  if s == '' then return 0 end
  _, t, _, _, o = struct.unpack(LFMT, s)
else
  local h = redis.call('HMGET', KEYS[1], 'o', 't')
  o, t = h[1], tonumber(h[2])
end
if o ~= ARGV[4] or t ~= tonumber(ARGV[5]) then return 0 end
redis.call('SET', KEYS[1], '')
if g[2] then redis.call('PUBLISH', base .. 'h:' .. ARGV[6], '1') end
return 1
`)

// ARGV: base, now.
var leaseGet = script(`
local l = lrec(KEYS[1])
if not l then return {'notfound'} end
return {'ok', l.o, l.t, l.a, l.e, l.v}
`)

// ARGV: base, now, status, after, limit. Reply: id and wf_reply per row.
var listWorkflows = script(`
local idx = base .. 'i:w'
if ARGV[3] ~= '' then idx = base .. 'i:w:' .. ARGV[3] end
local min = '-'
if ARGV[4] ~= '' then min = '(' .. ARGV[4] end
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYLEX', idx, min, '+', 'LIMIT', 0, tonumber(ARGV[5]))) do
  local k = base .. 'w:' .. id
  if redis.call('EXISTS', k) == 1 then cat(out, cat({id}, wf_reply(k))) end
end
return out
`)

// ARGV: base, now, state, after, limit. Reply: key and key_reply per
// row. A filter on completed or expired keys walks the scope's key index
// in batches within the script until the page is full.
var listKeys = script(`
local now = clock(ARGV[2])
local state, limit = ARGV[3], tonumber(ARGV[5])
local idx = base .. 'i:k'
if state == 'claimed' then idx = base .. 'i:kc' end
local cursor = '-'
if ARGV[4] ~= '' then cursor = '(' .. ARGV[4] end
local batch = math.max(limit, 256)
local out, n = {}, 0
while n < limit do
  local ids = redis.call('ZRANGEBYLEX', idx, cursor, '+', 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    local r = keyrec(base .. 'k:' .. id)
    if r and key_live(r, now) then
      local rep = key_reply(r, now)
      if state == '' or rep[3] == state or rep[3] == 'corrupt' then
        cat(out, cat({id}, rep))
        n = n + 1
        if n == limit then break end
      end
    end
  end
  if #ids < batch then break end
  cursor = '(' .. ids[#ids]
end
return out
`)

// ARGV: base, now, held ('1'/'0'), after, limit.
var listLeases = script(`
local now = clock(ARGV[2])
local held, limit = ARGV[3] == '1', tonumber(ARGV[5])
local cursor = '-'
if ARGV[4] ~= '' then cursor = '(' .. ARGV[4] end
local batch = math.max(limit, 256)
local out, n = {}, 0
while n < limit do
  local ids = redis.call('ZRANGEBYLEX', base .. 'i:l', cursor, '+', 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    local l = lrec(base .. 'l:' .. id)
    if l and (not held or l.e > now) then
      cat(out, {id, l.o, l.t, l.a, l.e, l.v})
      n = n + 1
      if n == limit then break end
    end
  end
  if #ids < batch then break end
  cursor = '(' .. ids[#ids]
end
return out
`)

// cleanupScope deletes (ARGV[8] = '1') or counts what Cleanup would
// delete in one scope. ARGV: base, now, terminal age, tolerance, then the
// limits of workflows, keys, outcomes and leases (each may be 0: then it
// only reports whether there is any), delete. Reply: the four counts and
// the four "more" flags.
var cleanupScope = script(`
local now = clock(ARGV[2])
local age, tol = tonumber(ARGV[3]), tonumber(ARGV[4])
local lw, lk, lo, ll = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local del = ARGV[9] == '1'
local function take(list, lim) local n = math.min(#list, lim) return n, #list > lim end

local ws = redis.call('ZRANGEBYSCORE', base .. 'i:wt', '-inf', f(now - age), 'LIMIT', 0, lw + 1)
local nw, mw = take(ws, lw)
if del then for i = 1, nw do drop_wf(ws[i]) end end

local kf = redis.call('ZRANGEBYSCORE', base .. 'i:kf', '-inf', f(now), 'LIMIT', 0, lk + 1)
local kx = redis.call('ZRANGEBYSCORE', base .. 'i:kx', '-inf', '(' .. f(now - tol), 'LIMIT', 0, lk + 1)
local ks = cat(cat({}, kf), kx)
local nk, mk = take(ks, lk)
if del then for i = 1, nk do drop_key(ks[i]) wake(ks[i]) end end

-- Outcomes past ExpiresAt whose tombstone still runs (ForgetAt > now).
local outs, cursor = {}, 0
while #outs <= lo do
  local batch = redis.call('ZRANGEBYSCORE', base .. 'i:ke', '-inf', f(now), 'LIMIT', cursor, 256)
  for _, key in ipairs(batch) do
    if num(redis.call('HGET', base .. 'k:' .. key, 'fa')) > now then
      outs[#outs + 1] = key
      if #outs > lo then break end
    end
  end
  if #batch < 256 then break end
  cursor = cursor + 256
end
local no, mo = take(outs, lo)
if del then
  for i = 1, no do
    redis.call('HDEL', base .. 'k:' .. outs[i], 'o')
    redis.call('ZREM', base .. 'i:ke', outs[i])
  end
end

-- Leases: the scope's lease index in batches; a released lease's
-- tombstone and entry are removed (when deleting) and not counted.
local ls, lcur = {}, '-'
while #ls <= ll do
  local batch = redis.call('ZRANGEBYLEX', base .. 'i:l', lcur, '+', 'LIMIT', 0, 256)
  for _, res in ipairs(batch) do
    local l = lrec(base .. 'l:' .. res)
    if not l then
      if del then
        redis.call('DEL', base .. 'l:' .. res)
        redis.call('ZREM', base .. 'i:l', res)
      end
    elseif l.e < now - tol then
      ls[#ls + 1] = res
      if #ls > ll then break end
    end
  end
  if #batch < 256 then break end
  lcur = '(' .. batch[#batch]
end
local nl, ml = take(ls, ll)
if del then for i = 1, nl do drop_lease(ls[i]) lwake(tokres(ls[i])) end end
local function b(x) if x then return 1 end return 0 end
return {nw, nk, no, nl, b(mw), b(mk), b(mo), b(ml)}
`)

// ARGV: base, now, kind, id. A deleted lease signals its watchers.
var deleteRecord = script(`
local kind, id = ARGV[3], ARGV[4]
if kind == 'workflow' then return drop_wf(id) end
if kind == 'lease' then
  local n = drop_lease(id)
  if n == 1 then lwake(tokres(id)) end
  return n
end
local n = redis.call('EXISTS', base .. 'k:' .. id)
drop_key(id)
wake(id)
return n
`)
