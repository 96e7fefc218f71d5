package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// probe is `raftmq probe URL`: it exits 0 when URL answers 200 within two
// seconds. Images built FROM scratch have no shell or curl, so container
// health checks call the binary itself.
func probe(url string, stderr io.Writer) int {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "probe %s: %v\n", url, err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "probe %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
