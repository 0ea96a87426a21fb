# Two entry points for a fresh clone: `make book` and `make test`.
# Both create .venv when needed and install torch==2.13.0 before the package, so that the
# package's unpinned torch requirement is already met.  On Linux, PyPI's wheel of torch is
# the CUDA build (a 5.4 GB virtual environment, measured); on a machine without a GPU,
# `make test TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu"` installs the
# CPU build instead (1.7 GB).  Either runs every chapter and test.

# The interpreter .venv is made from (`make test PYTHON=python3.12` chooses another): the
# system's /usr/bin/python3 where it is 3.10 or newer and has venv, else python3 on PATH.
# Debian and Ubuntu build theirs with profile-guided and link-time optimisation; this
# machine's pyenv builds have neither: make test took 473 s on Debian's, 507 s on pyenv's
# 3.11.7 (README, "Development").
# (Expanded where used, in the recipe that makes .venv: no other command pays for the check.)
SYSTEM_PYTHON = $(shell /usr/bin/python3 -c 'import sys, ensurepip; print(sys.version_info >= (3, 10))' 2>/dev/null)
PYTHON ?= $(if $(filter True,$(SYSTEM_PYTHON)),/usr/bin/python3,python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
# Files that change what the virtual environment must contain.
SETUP_FILES := pyproject.toml grader/pyproject.toml tools/pyproject.toml

.PHONY: venv book instructor test colab-test lint student clean browser-deps mutants formula-mutants

venv: $(STAMP)

# Python writes each module's bytecode when it first imports it, into the ignored
# __pycache__ folders, and every later process reuses it. A machine may turn that off with
# PYTHONDONTWRITEBYTECODE (this one does): then every kernel, sandboxed student process and
# test worker would compile all it imports again (5.9 s against 2.9 s per start, measured),
# so make's commands run without it. pip leaves the packages uncompiled: compiling every
# installed module up front took 20 s of each fresh install, most of it never imported.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): $(SETUP_FILES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile "$(TORCH)" $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet --no-compile -e ".[book,test]" -e ./grader -e ./tools
	touch $(STAMP)

## The STUDENT site (the public one) into _build/html: the student edition of every notebook
## (no homework solution, model answer, rubric or exercise solution) is written to student/
## and built, executing every chapter in smoke mode on the CPU. Publishing: instructor.md.
book: venv
	$(BIN)/python -m stablernn_tools book check-claims   # the paper's numbers carry their source mark
	$(BIN)/python -m stablernn_tools book forget-stale-build
	$(BIN)/python -m stablernn_tools student-edition --out student/
	rm -rf _build/html   # no page or search-index entry of an earlier (instructor) build survives
	STABLERNN_WIDGETS=frames $(BIN)/jupyter-book build student/ --path-output . -W --keep-going

## The INSTRUCTOR site (solutions, model answers, rubrics) into _build/instructor/_build/html.
instructor: venv
	STABLERNN_WIDGETS=frames $(BIN)/jupyter-book build . --path-output _build/instructor -W --keep-going

## Headless Chromium for the browser test (Debian package; needs root or sudo).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y -q chromium >/dev/null || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	  elif command -v sudo >/dev/null 2>&1; then sudo apt-get install -y -q chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package for the browser test"; fi; }

## axe-core for the browser test's accessibility check (npm; the version is pinned by
## tests/axe/package-lock.json, installed into the ignored tests/axe/node_modules).
AXE := tests/axe/node_modules/axe-core/axe.min.js
$(AXE): tests/axe/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Debian's npm package for the accessibility check"; exit 1; }
	npm ci --prefix tests/axe --no-audit --no-fund --loglevel=error
	touch $(AXE)

## Run the whole test suite (unit tests, notebooks, book build, browser check) on
## TEST_WORKERS processes (pytest-xdist): the tests that execute the notebooks and build the
## book go first to one of them, each site's browser tests then to whichever is free, the other
## test files beside them, a file at a time (tests/conftest.py's scheduler).
TEST_WORKERS ?= 2
test: venv browser-deps $(AXE)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check stablernn_lib tests grader tools
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

## Every Colab notebook of both editions, as the site hands them out (setup cell included),
## in an environment with Colab's Python and package versions (tests/colab_runtime/) and in
## one with their newest releases; fails if the setup cell would replace one of Colab's
## packages. The environments are cached in $STABLERNN_COLAB_CACHE (default
## ~/.cache/stablernn_lib/colab-env).
## Not part of `make test`; .ci/run runs it after. Times: README.md.
colab-test: venv
	$(BIN)/python -m pytest tests/colab_run.py -n 0 -q

## Mutation testing of the math (mutmut): the modules are the `only_mutate` list of
## [tool.mutmut] in pyproject.toml (the one place to edit when they move); only the fast math
## test files run.  MUTANT_MODULES picks some of them, e.g.
## `make mutants MUTANT_MODULES="stablernn_lib.core.bounds stablernn_lib.core.truncation"`.  Hours on 2
## cores: the report (data/results/mutation_report.md and .json) covers what has been run.
MUTANT_MODULES ?= $(shell $(BIN)/python -c "import tomllib; print(' '.join(p.removesuffix('.py').replace('/', '.') for p in tomllib.load(open('pyproject.toml', 'rb'))['tool']['mutmut']['only_mutate']))")
mutants: venv
	for module in $(MUTANT_MODULES); do \
	  OMP_NUM_THREADS=1 PYTHONPATH= $(BIN)/mutmut run "$$module.*" || exit 1; done
	$(BIN)/python -m stablernn_tools mutation-report

## Hand-written "formula" mutants of every bound (drop a factor or a denominator, halve or
## double a term; tools/stablernn_tools/formula_mutants.py), each applied to a temporary copy of
## the tree and run against the value tests; all must be killed.  About 30 min on 2 loaded
## cores; writes data/results/formula_mutants.json.
formula-mutants: venv
	OMP_NUM_THREADS=1 PYTHONPATH= $(BIN)/python -m stablernn_tools formula-mutants

## Same as `make book` (the student site).
student: book

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check stablernn_lib tests grader tools

clean:
	rm -rf _build student
