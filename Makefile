# The README's quick start: `make demo` and `make test`. Both bootstrap the
# machine (Debian packages, only what is missing), configure once, and build
# incrementally, so a second run does only what changed.
BUILD := build
NINJA := $(BUILD)/build.ninja

.PHONY: all setup build bench demo test test-unit test-integration test-e2e test-grading test-asan test-asan-unit test-tsan clean

all: build

setup:
	@scripts/bootstrap.sh

$(NINJA): CMakeLists.txt CMakePresets.json | setup
	cmake --preset default

build: setup $(NINJA)
	cmake --build $(BUILD)

# The benchmarks (bench/, results in bench/RESULTS.md): not part of `build`.
bench: build
	cmake --build $(BUILD) --target fd_benchmarks

demo: build
	$(BUILD)/bin/firedrill demo

test: build
	ctest --preset default

test-unit: build
	ctest --preset default -L unit

test-integration: build
	ctest --preset default -L integration

test-e2e: build
	ctest --preset default -L e2e

# Second plays of scenarios with a wrong fix (the "grading" label, out of
# `make test`: it plays each scenario once); bench/grading_reliability plays
# every scenario's wrong fix on 10 seeds.
test-grading: build
	ctest --preset grading

# Our code under sanitizers (LibTorch, gRPC and protobuf are Debian's,
# uninstrumented): ASan + UBSan over the unit and integration suites, TSan
# over the controller's unit tests. Separate build trees.
test-asan: setup
	cmake --preset asan
	cmake --build --preset asan
	ctest --preset asan

# CI's share of it (.ci/run): the unit suites, which hold the controller,
# scorer, store, CLI and the trainer's pieces, within CI's time budget.
test-asan-unit: setup
	cmake --preset asan
	cmake --build --preset asan-unit
	ctest --preset asan-unit

test-tsan: setup
	cmake --preset tsan
	cmake --build --preset tsan
	ctest --preset tsan

clean:
	rm -rf $(BUILD) build-asan build-tsan
