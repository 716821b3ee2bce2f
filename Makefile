# Quick start: `make demo` runs the nightly job on the demo corpus; `make test` runs the whole suite.
# Both create .venv and install what they need on first use.
.PHONY: demo test lint ui bench bootstrap

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/engram-pipelines demo

test: bootstrap
	@scripts/test.sh

lint: bootstrap
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/lint-imports && .venv/bin/mypy

ui: bootstrap
	@mkdir -p data/dagster_home && test -f data/dagster_home/dagster.yaml || printf "telemetry:\n  enabled: false\n" > data/dagster_home/dagster.yaml
	DAGSTER_HOME=$(CURDIR)/data/dagster_home .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000
