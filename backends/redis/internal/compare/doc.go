// Package compare holds benchmarks only: durable's Redis backend doing
// acquire+release pairs of a fenced lease beside github.com/go-redsync/redsync
// and github.com/bsm/redislock doing acquire+release pairs of their locks,
// and the fenced floor (the least a fenced lock can do: two tiny scripts on
// the raw client), on the same private redis-server node. It is a nested module so that
// those two libraries, and the module graph they bring (go-redis v7 and
// v8, redigo, rueidis, valkey-go…), stay out of the root go.mod; nothing
// imports it. See backends/redis/BENCHMARKS.md.
package compare
