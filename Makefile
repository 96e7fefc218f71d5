# Convenience targets; CI runs .ci/run.
.PHONY: build test generate ci clean

build:
	CGO_ENABLED=0 go build -o bin/ ./cmd/...

test:
	go test -race ./...

generate:
	go generate ./...

ci:
	bash .ci/run

clean:
	rm -rf bin
