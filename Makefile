# memo-mw: `make demo` runs the demo chat app, `make test` runs the test suite.
# Both create the virtual environment (.venv) and install the package on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: venv test demo worker redis-server postgresql browser bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# The tests start their own redis-server on a free port; install it when missing and we can.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || test -x /usr/bin/redis-server || \
	  { (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null 2>&1 || \
	    echo "warning: redis-server is missing and could not be installed; Redis tests will be skipped"; }

# The store's tests also run on a private PostgreSQL server (initdb, pg_ctl); install Debian's when missing.
postgresql:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null 2>&1 || \
	    echo "warning: PostgreSQL is missing and could not be installed; the PostgreSQL tests will be skipped"; }

# The web page's browser test drives Debian's headless Chromium with chromedriver.
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
	  { (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 || \
	    echo "warning: chromium/chromium-driver are missing and could not be installed; the browser test will be skipped (and fail under CI=true)"; }

test: venv redis-server postgresql browser
	$(BIN)/python -m pytest

demo: venv
	$(BIN)/python -m memo_mw.demo

worker: venv
	$(BIN)/memo-mw worker

# The performance suite (docs/performance.md): wrk drives the HTTP figure; installed when missing and we can.
bench: venv redis-server postgresql
	@command -v wrk >/dev/null 2>&1 || (apt-get install -y -qq wrk >/dev/null 2>&1) || \
	  echo "warning: wrk is missing and could not be installed; the HTTP figure will be skipped"
	$(BIN)/python bench/perf.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache var
