package redis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/durable-go/durable/contract"
	goredis "github.com/redis/go-redis/v9"
)

// Doctor implements contract.Doctor. It changes nothing. Its checks, on
// every primary (each node of a cluster):
//
//   - connect: the server answers PING (and its version);
//   - eviction: maxmemory-policy is noeviction (any other policy can
//     evict an idempotency key, a lease or a fence);
//   - persistence: appendonly yes, and appendfsync always or everysec
//     (appendfsync no leaves when the AOF reaches the disk to the kernel;
//     no AOF loses every write since the last snapshot on a crash).
//     everysec passes with a note: up to a second of acknowledged writes
//     can be lost in a crash of the machine.
//
// Where CONFIG GET is refused (managed Redis renames or forbids it) the
// eviction and persistence checks fail with "cannot verify": check those
// settings in the provider's console.
func (b *Backend) Doctor(ctx context.Context) []contract.Check {
	type nodeInfo struct {
		version            string
		policy, aof, fsync string
		cfgErr             error
	}
	var mu sync.Mutex
	var nodes []nodeInfo
	err := b.eachPrimary(ctx, func(ctx context.Context, c *goredis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
		var n nodeInfo
		if info, err := c.Info(ctx, "server").Result(); err == nil {
			for _, l := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
					n.version = v
				}
			}
		}
		n.policy, n.cfgErr = configGet(ctx, c, "maxmemory-policy")
		if n.cfgErr == nil {
			n.aof, n.cfgErr = configGet(ctx, c, "appendonly")
		}
		if n.cfgErr == nil {
			n.fsync, n.cfgErr = configGet(ctx, c, "appendfsync")
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	})
	if err != nil {
		e := b.fail(ctx, err, false)
		return []contract.Check{{Name: "connect", Detail: e.Error(), Err: e}}
	}
	versions := map[string]bool{}
	for _, n := range nodes {
		versions[n.version] = true
	}
	var vs []string
	for v := range versions {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	what := "one node"
	if b.cluster != nil {
		what = fmt.Sprintf("a cluster of %d primaries", len(nodes))
	}
	checks := []contract.Check{{Name: "connect", OK: true, Detail: fmt.Sprintf("Redis %s, %s", strings.Join(vs, ", "), what)}}

	evict := contract.Check{Name: "eviction", OK: true, Detail: "maxmemory-policy noeviction"}
	persist := contract.Check{Name: "persistence", OK: true, Detail: "appendonly yes, appendfsync always: an acknowledged write survives a crash"}
	for _, n := range nodes {
		if n.cfgErr != nil {
			msg := "cannot verify: the server refused CONFIG GET (managed Redis?)"
			evict = contract.Check{Name: "eviction", Detail: msg, Hint: "make sure maxmemory-policy is noeviction in the provider's settings"}
			persist = contract.Check{Name: "persistence", Detail: msg, Hint: "make sure AOF persistence is on (appendonly yes, appendfsync always or everysec)"}
			break
		}
		if n.policy != "noeviction" && evict.OK {
			evict = contract.Check{Name: "eviction", Detail: "maxmemory-policy " + n.policy + ": Redis may evict idempotency keys, leases and fences",
				Hint: "CONFIG SET maxmemory-policy noeviction (and in redis.conf); Open refuses this server until then",
				Err:  &contract.Error{Code: contract.Misconfigured, Msg: "maxmemory-policy is not noeviction"}}
		}
		switch {
		case !persist.OK:
		case n.aof != "yes":
			persist = contract.Check{Name: "persistence", Detail: "appendonly no: a restart loses every write since the last snapshot",
				Hint: "appendonly yes and appendfsync always (see the durability table in the package documentation)",
				Err:  &contract.Error{Code: contract.Misconfigured, Msg: "AOF is off"}}
		case n.fsync == "no":
			persist = contract.Check{Name: "persistence", Detail: "appendfsync no: the kernel decides when acknowledged writes reach the disk",
				Hint: "appendfsync always (or everysec, losing up to a second in a crash)",
				Err:  &contract.Error{Code: contract.Misconfigured, Msg: "appendfsync is no"}}
		case n.fsync == "everysec" && persist.Detail != "":
			persist.Detail = "appendonly yes, appendfsync everysec: a crash of the machine can lose up to a second of acknowledged writes"
		}
	}
	return append(checks, evict, persist)
}
