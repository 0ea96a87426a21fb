# Two entry points for a fresh clone: `make book` and `make test`.
# Both create .venv when needed and install torch==2.13.0 before the package
# (an unpinned torch would pull the CUDA build and gigabytes of packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
# Files that change what the virtual environment must contain.
SETUP_FILES := pyproject.toml

.PHONY: venv book test lint student clean browser-deps

venv: $(STAMP)

$(STAMP): $(SETUP_FILES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[book,test]"
	touch $(STAMP)

## Build the site into _build/html, executing every chapter in smoke mode on the CPU.
book: venv
	$(BIN)/python -m stablernn_lib.book check-claims   # the paper's numbers carry their source mark
	$(BIN)/python -m stablernn_lib.book forget-stale-build
	STABLERNN_WIDGETS=frames $(BIN)/jupyter-book build . -W --keep-going

## Headless Chromium for the browser test (Debian package; needs root or sudo).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y -q chromium >/dev/null || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	  elif command -v sudo >/dev/null 2>&1; then sudo apt-get install -y -q chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package for the browser test"; fi; }

## Run the whole test suite (unit tests, notebooks, book build, browser check).
test: venv browser-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

## Write the student edition (no solutions) to student/ and build it into student/_build/html.
student: venv
	$(BIN)/python -m stablernn_lib homework student-edition --out student/
	STABLERNN_WIDGETS=frames $(BIN)/jupyter-book build student/ -W --keep-going

lint: venv
	$(BIN)/ruff check .

clean:
	rm -rf _build student
