package main

import (
	"fmt"
	"strconv"
	"strings"
)

// defaultDiskFreeLimit is the free space of the data dir below which
// publishers are blocked: 1 GiB (RabbitMQ's default is 50 MB, too little
// for a node whose raft log and snapshots grow by the messages it holds).
const defaultDiskFreeLimit = 1 << 30

// byteSize is a flag of bytes written as RabbitMQ's disk_free_limit takes
// them: a number of bytes, or one with a unit, where k, K, KiB, M, MiB, G,
// GiB, T and TiB are powers of 1024 and kB, KB, MB, GB and TB powers of
// 1000 ("2GB", "1GiB", "500MB").
type byteSize uint64

var byteUnits = map[string]uint64{
	"": 1, "B": 1,
	"k": 1 << 10, "K": 1 << 10, "KiB": 1 << 10, "kiB": 1 << 10,
	"M": 1 << 20, "MiB": 1 << 20,
	"G": 1 << 30, "GiB": 1 << 30,
	"T": 1 << 40, "TiB": 1 << 40,
	"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

func (b *byteSize) String() string { return strconv.FormatUint(uint64(*b), 10) }

func (b *byteSize) Set(s string) error {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	mult, ok := byteUnits[unit]
	if !ok || num == "" {
		return fmt.Errorf("%q is not a size in bytes (a number, optionally with a unit such as 500MB, 2GB or 1GiB)", s)
	}
	if n, err := strconv.ParseUint(num, 10, 64); err == nil {
		if n > ^uint64(0)/mult {
			return fmt.Errorf("%q is too large", s)
		}
		*b = byteSize(n * mult)
		return nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f*float64(mult) >= 1<<63 {
		return fmt.Errorf("%q is not a size in bytes (a number, optionally with a unit such as 500MB, 2GB or 1GiB)", s)
	}
	*b = byteSize(f * float64(mult))
	return nil
}
