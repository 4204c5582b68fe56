# Sluice: every target is idempotent. `make demo` and `make test` install what they need.
SHELL := /bin/bash
BUILD := build
CLANG ?= clang
BPF_CFLAGS := -O2 -g -target bpf -Wall -Werror -I$(BUILD) -Inative -Ibpf
# x86-64 keeps loads in program order (TSO): the UDP slot's seqlock read
# (bpf/lib/sock_slot.h, lb4_sock_uslot_read) relies on it; elsewhere the lock.
ifeq ($(shell uname -m),x86_64)
BPF_CFLAGS += -DSLUICE_ORDERED_LOADS
endif
BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_OBJS := $(patsubst bpf/%.bpf.c,$(BUILD)/%.bpf.o,$(BPF_SRCS))
BPF_HDRS := $(wildcard bpf/lib/*.h) native/sluice_abi.h
TS_SRCS := $(shell find src test bench -name '*.ts' 2>/dev/null)
NATIVE_BINS := $(patsubst native/%.c,$(BUILD)/%,$(wildcard native/*.c))

.PHONY: all deps build bpf ts native test-helpers abi abi-check test test-unit demo bench bench-bins bench-kubeproxy clean soak

all: build

deps:
	@./scripts/deps.sh

build: deps bpf abi-check ts native test-helpers

$(BUILD)/vmlinux.h:
	@mkdir -p $(BUILD)
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(BUILD)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) $(BUILD)/vmlinux.h
	$(CLANG) $(BPF_CFLAGS) -c $< -o $@

bpf: $(BPF_OBJS)

# The TypeScript codecs in src/abi/generated.ts are generated from the BTF of
# the compiled objects (native/sluice_abi.h is the one source of truth). The
# build fails when the committed file no longer matches the C layout;
# `make abi` regenerates it.
abi: $(BPF_OBJS)
	node scripts/gen-abi.js $(BPF_OBJS) > $(BUILD)/generated.ts && cp $(BUILD)/generated.ts src/abi/generated.ts

abi-check: $(BPF_OBJS)
	@node scripts/gen-abi.js $(BPF_OBJS) > $(BUILD)/generated.ts
	@cmp -s $(BUILD)/generated.ts src/abi/generated.ts || { \
	  echo "abi: src/abi/generated.ts does not match the BTF of $(BPF_OBJS)"; \
	  echo "abi: native/sluice_abi.h changed; run 'make abi' and commit the result"; \
	  diff -u src/abi/generated.ts $(BUILD)/generated.ts | head -40; exit 1; }

ts: dist/.stamp
dist/.stamp: $(TS_SRCS) tsconfig.json package.json
	npx tsc -p tsconfig.json
	@touch $@

$(BUILD)/%: native/%.c native/sluice_abi.h
	$(CC) -O2 -Wall -Werror -o $@ $<

native: $(NATIVE_BINS)

# C helpers of the tests (test/helpers/*.c): traffic generators the e2e tier runs inside test namespaces.
TEST_HELPER_BINS := $(patsubst test/helpers/%.c,$(BUILD)/%,$(wildcard test/helpers/*.c))
$(BUILD)/%: test/helpers/%.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<
# BPF objects of the tests (test/bpf/*.bpf.c, run with BPF_PROG_TEST_RUN): in
# build/test/, not build/ (build/*.bpf.o generate src/abi/generated.ts).
TEST_BPF_OBJS := $(patsubst test/bpf/%.bpf.c,$(BUILD)/test/%.bpf.o,$(wildcard test/bpf/*.bpf.c))
$(BUILD)/test/%.bpf.o: test/bpf/%.bpf.c $(BPF_HDRS) $(BUILD)/vmlinux.h
	@mkdir -p $(BUILD)/test
	$(CLANG) $(BPF_CFLAGS) -Ibpf/lib -c $< -o $@
test-helpers: $(TEST_HELPER_BINS) $(TEST_BPF_OBJS)

# The CNI plugin embeds build/pod_lb.bpf.o (.incbin), so the one binary
# copied to /opt/cni/bin can attach the pod-veth programs even before the
# agent has pinned them; it is linked statically (libbpf, libelf, zlib)
# because it runs on the host, which need not have libbpf installed.
$(BUILD)/sluice-cni: native/sluice-cni.c native/sluice_abi.h $(BUILD)/pod_lb.bpf.o
	$(CC) -O2 -Wall -Werror -Inative -DSLUICE_POD_LB_OBJECT='"$(CURDIR)/$(BUILD)/pod_lb.bpf.o"' -static -o $@ $< -lbpf -lelf -lz

test: build
	@./scripts/test-tiers.sh $(TIERS)

test-unit: build
	@./scripts/test-tiers.sh unit abi

demo: build
	@./bin/sluice demo $(DEMO_ARGS)

# Under the bench lock: two runs at once would measure each other.
bench: build
	@flock /tmp/sluice-bench.lock node dist/bench/main.js $(if $(QUICK),--quick,)

# Upstream kube-proxy (iptables, nftables; defaults and tuned) vs the agent on
# the real kube-apiserver, alone (bench/upstream.ts): 10 000 Services
# (SERVICES=100000 allowed), or QUICK=1 for 300 Services and 5 changes. The
# objects come from a cached etcd snapshot (/var/cache/sluice/snapshots, built
# through the API on the first run for its key: bench/snapshot.ts). A full
# (not QUICK) run writes docs/bench-kubeproxy-results.{json,md}.
KP_SERVICES = $(or $(SERVICES),$(if $(QUICK),300,10000))
bench-kubeproxy: build
	@flock /tmp/sluice-bench.lock node dist/bench/part.js upstream \
	  --services $(KP_SERVICES) --changes $(if $(QUICK),5,20) \
	  --cold-budget-s $(if $(QUICK),60,$(if $(filter 100000,$(KP_SERVICES)),900,300)) \
	  --create-budget-s $(if $(filter 100000,$(KP_SERVICES)),7200,1800) $(if $(QUICK),,--write-results)

clean:
	rm -rf $(BUILD) dist

# bench: the C parts of `make bench` (bench/main.ts drives them): the load
# generator, the backend server, and the loader that puts build/sock_lb.bpf.o
# into a bench cgroup with maps sized for the scale measured.
BENCH_BINS := $(BUILD)/connbench $(BUILD)/benchserver $(BUILD)/sluiceload $(BUILD)/npbench $(BUILD)/fe4lookup $(BUILD)/bench/fe4lookup.bpf.o
$(BUILD)/connbench: bench/connbench.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<
$(BUILD)/npbench: bench/npbench.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<
$(BUILD)/benchserver: bench/benchserver.c
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<
$(BUILD)/sluiceload: bench/sluiceload.c native/sluice_abi.h
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Werror -Inative -o $@ $< -lbpf
# fe4lookup: one IPv4 frontend lookup alone, per map layout (BPF_PROG_TEST_RUN).
$(BUILD)/fe4lookup: bench/fe4lookup.c bench/fe4lookup.h bpf/lib/hash64.h native/sluice_abi.h
	@mkdir -p $(BUILD)
	$(CC) -O2 -Wall -Wextra -Werror -Inative -Ibench -Ibpf/lib -o $@ $< -lbpf
# In build/bench/, not build/: build/*.bpf.o are the product objects whose
# BTF generates src/abi/generated.ts (test/abi reads every one of them).
$(BUILD)/bench/fe4lookup.bpf.o: bench/fe4lookup.bpf.c bench/fe4lookup.h bpf/lib/hash64.h native/sluice_abi.h $(BUILD)/vmlinux.h
	@mkdir -p $(BUILD)/bench
	$(CLANG) $(BPF_CFLAGS) -Ibench -Ibpf/lib -c $< -o $@
bench: $(BENCH_BINS)
# The C parts alone (`make bench` builds them and then runs the whole bench).
bench-bins: $(BENCH_BINS)

# ---- real nodes (issue 16; docs/real-nodes.md) ----------------------------------
# image: Sluice's OCI image from Debian packages (mmdebstrap) and `make build`
# output, assembled with umoci; no registry. build/image/sluice-<version>.oci.tar.
# node-tier: kubelet + containerd nodes, Sluice from deploy/kubernetes, a smoke,
# teardown. Shares the cluster tier's lock (same machine-wide resources).
.PHONY: image node-binaries node-tier
image: build
	@./scripts/image.sh >/dev/null
node-binaries:
	@./scripts/node-binaries.sh $(if $(E2E),--e2e,)
node-tier: build
	@flock /tmp/sluice-cluster.lock ./scripts/node-tier.sh run

# The bad-input fuzz tests in their long form (docs/bad-input.md); counts in build/fuzz-results.json.
.PHONY: fuzz
fuzz: build
	FUZZ_RUNS=$${FUZZ_RUNS:-60} node --test --test-concurrency=1 dist/test/unit/bad-input-props.test.js dist/test/bpf/packet_fuzz.test.js dist/test/e2e/bad_input.test.js

# soak: the churn soak (issue 13 item 2; bench/soak.ts): the real agent under
# endpoint churn with clients connecting through the socket LB; prints one
# table, written to build/soak-results.md. SOAK_S (default 180),
# SOAK_SERVICES (10000), SOAK_RATE (1000 updates/s), SOAK_SAMPLED (16).
.PHONY: soak
soak: build
	@flock /tmp/sluice-bench.lock node dist/bench/soakReport.js

# conformance: upstream e2e.test's `[sig-network] Services` specs on the node
# tier, with kube-proxy (iptables) and with Sluice; writes
# docs/conformance-services.md. SELECTION=conformance (default) or all. Takes
# the cluster lock itself, per side, only while a cluster is up.
.PHONY: conformance
conformance: build
	@./scripts/conformance.sh run $(or $(SELECTION),conformance)
