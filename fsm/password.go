package fsm

import (
	"crypto/sha256"
	"crypto/subtle"
)

// PasswordHashAlgorithm names the scheme of HashPassword, as RabbitMQ names
// the same scheme in its definitions export.
const PasswordHashAlgorithm = "rabbit_password_hashing_sha256"

// HashPassword returns salt followed by sha256(salt || password): RabbitMQ's
// salted SHA-256 scheme. The salt is chosen by the proposer (it is random,
// so it never comes from inside the state machine); only the result goes
// into the log.
func HashPassword(salt []byte, password string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	out := make([]byte, 0, len(salt)+sha256.Size)
	out = append(out, salt...)
	return h.Sum(out)
}

// CheckPassword reports whether password matches a hash made by
// HashPassword with a salt of saltLen bytes, in constant time.
func CheckPassword(hash []byte, saltLen int, password string) bool {
	if saltLen < 0 || len(hash) != saltLen+sha256.Size {
		return false
	}
	want := HashPassword(hash[:saltLen], password)
	return subtle.ConstantTimeCompare(want, hash) == 1
}

// PasswordSaltLen is the salt length raftmq uses (RabbitMQ uses 4 bytes).
const PasswordSaltLen = 4
