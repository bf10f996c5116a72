# The README's two commands. Each does the whole set-up: Debian packages (only those missing),
# configure, build; then its job. PRESET picks a CMakePresets.json preset (release, debug, cuda).
PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)
OUT    ?= out

.PHONY: all deps configure build demo test test-sanitizers dash dash-replay screenshots scale-pictures slides slides-pictures lab-release autograder mutation-score clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@mkdir -p build
	@cmake --preset $(PRESET) >$(BUILD).configure.log 2>&1 || { cat $(BUILD).configure.log; exit 1; }
	@grep 'scalelab:' $(BUILD).configure.log | sed 's/^-- //'

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

# The main job: the tour — every strategy on 4 simulated A100s (NVLink) on Fashion-MNIST, one
# table, a Chrome trace of each in $(OUT)/.
demo: build
	@mkdir -p $(OUT)
	$(BUILD)/scalelab tour --hw a100-nvlink-8 --devices 4 --steps 300 --out $(OUT)

# The dashboard, live: the launch panel with DDP on 4 simulated A100s, started at once (change the
# strategy and press Start again). Needs a display.
DASH_ARGS ?= --strategy ddp --devices 4 --model mlp:784-512-256-128-10 --bucket-mb 0.25 --first-bucket-mb 0.1 --start
dash: build
	$(BUILD)/apps/scalelab-dash/scalelab-dash $(DASH_ARGS)

# The dashboard replaying a trace (a DDP run is written first if $(OUT)/ has none).
DASH_TRACE ?= $(OUT)/ddp.trace.json
dash-replay: build
	@mkdir -p $(OUT)
	@[ -f $(DASH_TRACE) ] || $(BUILD)/scalelab train --strategy ddp --devices 4 --device sim --hw a100-nvlink-8 \
	  --model mlp:784-512-256-128-10 --steps 300 --quiet --trace $(DASH_TRACE)
	$(BUILD)/apps/scalelab-dash/scalelab-dash --replay $(DASH_TRACE)

# The README's dashboard pictures (docs/img), drawn under Xvfb, each with the stamp of what drew
# it beside it (NAME.png.inputs; ctest readme_pictures fails when one is stale).
screenshots: build
	bash scripts/screenshots.sh $(BUILD) docs/img

# The README's scaling pictures (docs/img/scale-*.svg and the tables beside them), drawn by
# `scalelab scale` from dry runs on simulated H100 clusters of up to 4096 GPUs.
scale-pictures: build
	bash scripts/scale-pictures.sh $(BUILD) docs/img

# The lecture decks (slides/NN-*.md) to slides/build/: HTML, and PDF where Chromium is installed.
# Every figure, excerpt and number is made again first, from runs of this build (slides/README.md).
slides: build
	bash scripts/slides.sh $(BUILD) slides/build

# The same, and the README's picture of each deck (docs/img/slides-NN.png; needs Chromium), each
# with its stamp (slides-NN.png.inputs; the slides test fails when one is stale).
slides-pictures: build
	bash scripts/slides.sh $(BUILD) slides/build docs/img

# The students' hand-out of the labs: READMEs, stubs, harnesses and public checks — no solutions,
# no mutants, no hidden checks (labs/README.md).
lab-release: build
	$(BUILD)/scalelab grade --release dist/scalelab-labs.tar.gz

# Gradescope's autograder for one lab (LAB=05-ddp): dist/autograder-LAB.zip, setup.sh and
# run_autograder with the sources — no solutions, no mutants (labs/README.md, "Gradescope").
LAB ?= 01-collectives
autograder:
	bash scripts/autograder.sh $(LAB) dist/autograder-$(LAB).zip

# The rubric's mutation score for every lab (slow: minutes per lab): the share of automatic
# mutations of each solution its checks catch, and the survivors.
mutation-score: build
	cd $(BUILD) && ctest --output-on-failure -L mutation

test: build
	cd $(BUILD) && ctest -j $(JOBS) --no-tests=error --output-on-failure --timeout 900 -LE mutation

# The fuzz suite and the unit tests again, built with AddressSanitizer and UndefinedBehaviorSanitizer
# (the debug preset, at -O1; LeakSanitizer on). CI runs it after `make test`.
SANITIZER_TESTS ?= ^(test_|fuzz_)
test-sanitizers:
	$(MAKE) build PRESET=debug
	cd build/debug && UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(JOBS) --no-tests=error --output-on-failure --timeout 900 -R '$(SANITIZER_TESTS)' -LE cuda

clean:
	rm -rf build $(OUT)
