package durable

import (
	"crypto/rand"
	"encoding/base64"
)

// NewClaimToken returns a fresh random claim token for
// ClaimRequest.Token: 32 characters of base64url (24 bytes from
// crypto/rand). Use one per logical call and reuse it in that call's
// retried ClaimKey, so that a claim whose reply was lost comes back as the
// caller's own instead of in flight. [Store.Do], [DoTx] and the middleware
// do this themselves.
func NewClaimToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}
