# The README's quick start: `make demo` and `make test`. Both bootstrap the
# machine (Debian packages, only what is missing), configure once, and build
# incrementally, so a second run does only what changed.
BUILD := build
NINJA := $(BUILD)/build.ninja

.PHONY: all setup build demo test test-unit test-integration test-e2e clean

all: build

setup:
	@scripts/bootstrap.sh

$(NINJA): CMakeLists.txt CMakePresets.json | setup
	cmake --preset default

build: setup $(NINJA)
	cmake --build $(BUILD)

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

clean:
	rm -rf $(BUILD)
