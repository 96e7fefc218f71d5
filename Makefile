# Convenience targets; CI runs .ci/run.
.PHONY: build test fault generate ci clean

# The version every surface reports (raftmq --version, AMQP server
# properties, the management API): the work tree's tag or commit, or
# `make VERSION=v1.2.3 image` for a release. Empty (no git), the binary
# reports what the Go toolchain recorded, else "dev".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS = $(if $(VERSION),-X github.com/raftmq/raftmq/internal/version.Version=$(VERSION))

build:
	CGO_ENABLED=0 go build -ldflags='$(LDFLAGS)' -o bin/ ./cmd/...

test:
	go test -race -timeout 30m ./...

# The docker fault-injection suite alone, with its tables.
fault:
	go test -count=1 -v -run 'TestFaults|TestFaultSingleActiveConsumer|TestFaultDelayed' -timeout 30m ./e2e/fault/

generate:
	go generate ./...

ci:
	bash .ci/run

clean:
	rm -rf bin

# The image is built FROM scratch around a static binary: no registry needed.
.PHONY: image cluster-up cluster-down
image:
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w $(LDFLAGS)' -o deploy/ ./cmd/raftmq ./cmd/raftmqctl
	docker build -t raftmq:dev -f deploy/Dockerfile deploy

# docker compose (v2 plugin) where it exists, else docker-compose (v1).
COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)

cluster-up: image
	$(COMPOSE) -f deploy/docker-compose.yml up -d

cluster-down:
	$(COMPOSE) -f deploy/docker-compose.yml down -v
