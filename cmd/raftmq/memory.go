package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// defaultMemoryRelative is RabbitMQ's default high-water mark, its
// vm_memory_high_watermark.relative: 40% of the memory available.
const defaultMemoryRelative = 0.4

// defaultMemoryWatermark is the default high-water mark in bytes.
func defaultMemoryWatermark() int64 { return relativeMemoryWatermark(defaultMemoryRelative) }

// relativeMemoryWatermark is fraction of the memory available to the
// process (the cgroup limit when it is lower than the machine's memory),
// or of 1 GiB when neither is known.
func relativeMemoryWatermark(fraction float64) int64 {
	total := systemMemory()
	if total <= 0 {
		total = 1 << 30
	}
	return int64(float64(total) * fraction)
}

// systemMemory returns the machine's memory, lowered to the cgroup (v2
// or v1) memory limit when one is set; 0 when unknown.
func systemMemory() int64 {
	var total int64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		total = memTotal(b)
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}

// memTotal parses MemTotal (in kB) from /proc/meminfo.
func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return 0
}
