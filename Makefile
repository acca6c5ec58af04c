# Tailor's two entry points on a fresh Debian 12 machine (as root):
#   make demo   install what the programs need, build them, run the main job
#               end to end
#   make test   install what is missing for the tests too, build, run every
#               test through ctest
BUILD ?= build
JOBS ?= $(shell nproc)
# One test more than cores: the suite waits as well as computes (Slurm's
# intervals, processes that wait on each other), and the third slot fills
# those waits (docs/testing.md: 675 -> 607 s on two cores).
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
# Warnings are errors in CI (CI=true), warnings only on a workstation.
WERROR ?= $(if $(CI),ON,OFF)
# The runner's CUDA path: ON where the CUDA toolkit is installed (default),
# TAILOR_CUDA=OFF for a CPU-only build.
CUDA_FLAG = $(if $(TAILOR_CUDA),-DTAILOR_CUDA=$(TAILOR_CUDA))
export TAILOR_CUDA

.PHONY: all setup setup-demo configure build test demo fuzz clean

all: build

setup:
	@scripts/setup

# Only what building and running Tailor needs: no Slurm, podman, Chromium
# or Prometheus (those are the tests' peers).
setup-demo:
	@scripts/setup --demo

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DTAILOR_WERROR=$(WERROR) $(CUDA_FLAG) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(TEST_JOBS)

# The three programs and the SentencePiece module the runner loads.
demo: setup-demo
	@cmake -S . -B $(BUILD) -G Ninja -DTAILOR_WERROR=$(WERROR) $(CUDA_FLAG) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target tailor tailord tailor-runner tailor_sentencepiece
	@scripts/demo $(BUILD)

# The spec-parser fuzzer alone (also part of `make test`); FUZZ_SECONDS=60.
fuzz: configure
	@tests/fuzz/run_fuzz.sh $(BUILD)-fuzz $${FUZZ_SECONDS:-60}

clean:
	rm -rf $(BUILD) $(BUILD)-fuzz
