package fsm

import "testing"

func TestPassword_HashAndCheck(t *testing.T) {
	salt := []byte{1, 2, 3, 4}
	h := HashPassword(salt, "s3cret")
	if !CheckPassword(h, PasswordSaltLen, "s3cret") {
		t.Fatal("the right password was refused")
	}
	if CheckPassword(h, PasswordSaltLen, "s3cre") {
		t.Fatal("a wrong password was accepted")
	}
	if CheckPassword(h[:10], PasswordSaltLen, "s3cret") {
		t.Fatal("a truncated hash was accepted")
	}
	if other := HashPassword([]byte{4, 3, 2, 1}, "s3cret"); string(other) == string(h) {
		t.Fatal("different salts gave the same hash")
	}
}
