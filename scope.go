package durable

import (
	"crypto/sha256"
	"encoding/hex"
)

// TenantScope derives the scope of a tenant: "sha256:" followed by the 64
// hex digits of the SHA-256 of id. Raw tenant ids never reach storage, and
// any string, however long or odd, maps to a valid scope.
func TenantScope(id string) Scope {
	sum := sha256.Sum256([]byte(id))
	return Scope("sha256:" + hex.EncodeToString(sum[:]))
}
