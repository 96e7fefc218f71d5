package main

import (
	"io"
	"testing"
)

func TestConfig_DiskFreeLimit(t *testing.T) {
	c, err := parseConfig(nil, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.DiskFreeLimit != 1<<30 {
		t.Fatalf("default %d, want 1 GiB", c.Limits.DiskFreeLimit)
	}
	for in, want := range map[string]uint64{
		"0": 0, "50000000": 50000000, "2GB": 2e9, "1GiB": 1 << 30, "1G": 1 << 30, "500MB": 500e6,
		"500MiB": 500 << 20, "64kB": 64000, "64K": 64 << 10, "1.5GiB": 3 << 29, "2 GB": 2e9, "1TB": 1e12,
	} {
		c, err := parseConfig([]string{"--disk-free-limit", in}, envMap(nil), io.Discard)
		if err != nil || uint64(c.Limits.DiskFreeLimit) != want {
			t.Errorf("--disk-free-limit %s: %d %v, want %d", in, c.Limits.DiskFreeLimit, err, want)
		}
	}
	c, err = parseConfig(nil, envMap(map[string]string{"RAFTMQ_DISK_FREE_LIMIT": "3GB"}), io.Discard)
	if err != nil || c.Limits.DiskFreeLimit != 3e9 {
		t.Fatalf("from the environment: %v %v", c, err)
	}
	for _, bad := range []string{"", "GB", "-1", "2XB", "1.2.3G", "99999999999999999999"} {
		if _, err := parseConfig([]string{"--disk-free-limit", bad}, envMap(nil), io.Discard); err == nil {
			t.Errorf("--disk-free-limit %q accepted", bad)
		}
	}
}
