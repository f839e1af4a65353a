package postgres

import "github.com/durable-go/durable/internal/outcomecodec"

// Outcome headers are stored in the outcome_header bytea column in the
// shared, versioned header encoding of internal/outcomecodec (byte-exact
// for any name and value; JSON and jsonb are not: they cannot hold invalid
// UTF-8, and HTTP header values may contain obs-text). A nil map is stored
// as NULL; a name with no values reads back with a nil list.

func encodeHeader(h map[string][]string) []byte { return outcomecodec.EncodeHeader(h) }

func decodeHeader(b []byte) (map[string][]string, error) { return outcomecodec.DecodeHeader(b) }
