# On a fresh machine `make test` and `make demo` are the whole set-up:
# both run scripts/bootstrap.sh first (idempotent, seconds when nothing is missing).
SHELL := /bin/bash
VENV := .venv
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: bootstrap ryu-venv ns3-venv browser lint docs docs-images test test-slow test-all test-unit test-emu vm-image vm-test cluster-test vagrant-box vagrant-test demo clean bench

bootstrap:
	$(SUDO) bash scripts/bootstrap.sh

# The same controller app under ryu-manager, in .venv-ryu (tests/emu/test_controller.py runs it).
ryu-venv: bootstrap
	$(SUDO) bash scripts/ryu_venv.sh

# Mainline ns-3 from PyPI in .venv-ns3, for bench/dctcp_bench.py only.
ns3-venv: bootstrap
	$(SUDO) bash scripts/ns3_venv.sh

# Debian's Chromium and Playwright for the web view's browser tests (tests/emu/test_web.py).
browser: bootstrap
	$(SUDO) bash scripts/browser.sh

# ruff with the configuration in pyproject.toml; part of `make test`.
lint: bootstrap
	$(VENV)/bin/ruff check .

# The documentation site (mkdocs.yml, docs/), built offline into site/: open site/index.html. The fast tier
# builds it with --strict too (tests/unit/test_docs.py).
docs: bootstrap
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The docs' pictures (docs/img/), taken by the browser tests, `hpnlab topo show` and a quick run.
docs-images: browser
	$(SUDO) bash scripts/docs_images.sh

# The tiers (docs/development/tests.md). `make test` is the fast tier: unit tests and the emulation tests of behaviour that
# holds on any machine (routing, failover, PFC lossless, bytes = closed forms, CLI errors, cleanup, Ctrl-C at
# every start-up stage), each test bounded by pytest-timeout. `make test-slow` is the rest: the slow tier (every
# shipped experiment's quick run, labs end to end, the docs' runnable blocks, the sampled interrupt sweep, 64 hosts,
# the browser, ryu-manager) and the timing tier (faithful verdicts and rate figures). `make test-all` runs both. Each lists its
# 25 slowest tests and keeps its junit XML in results/ (CI keeps only the output).
FAST := not slow and not timing
test: bootstrap lint
	$(SUDO) $(VENV)/bin/pytest -q -rs -m "$(FAST)" --timeout=300 --durations=25 \
	  --junitxml=results/junit-fast.xml tests/unit tests/emu $(PYTEST_ARGS)

test-slow: bootstrap ryu-venv browser
	$(SUDO) $(VENV)/bin/pytest -q -rs -m "not ($(FAST))" --durations=25 \
	  --junitxml=results/junit-slow.xml tests/unit tests/emu $(PYTEST_ARGS)

test-all: test test-slow

test-unit: bootstrap lint
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

test-emu: bootstrap ryu-venv browser
	$(SUDO) $(VENV)/bin/pytest -q tests/emu $(PYTEST_ARGS)

# The full-kernel VM (soft-RoCE, kernel OVS, netem, RED): the image is built with
# debootstrap and provisioned by the scripts the Vagrantfile uses, cached by a hash
# of its inputs; vm-test boots it with qemu and runs tests/vm inside.
vm-image:
	$(SUDO) bash scripts/vm/build-image.sh

vm-test:
	$(SUDO) bash scripts/vm/run-tests.sh $(VM_PYTEST_ARGS)

# Two VMs from the same image plus SSH and sudo (scripts/vm/cluster-image.sh), joined by a cable on
# 127.0.0.1; tests/cluster runs on the first against both (issue #18).
cluster-test:
	$(SUDO) bash scripts/vm/cluster-test.sh $(CLUSTER_PYTEST_ARGS)

# A Vagrant box (libvirt) of plain Debian trixie made here with debootstrap, for rooms without Vagrant
# Cloud; BOX=offline makes it provisioned already, for rooms without any network. vagrant-test runs the
# Vagrantfile with Vagrant on it, end to end (tests/vagrant, issue #30); with BOX=offline on a VM network
# that has no way out.
BOX ?= plain
vagrant-box:
	$(SUDO) bash scripts/vm/build-box.sh $(BOX)

vagrant-test: bootstrap browser
	$(SUDO) env HPNLAB_BOX_KIND=$(BOX) bash scripts/vm/vagrant-test.sh $(VAGRANT_PYTEST_ARGS)

# Build the default HPN, show its table, ping every host NIC from every host,
# fail one host port and ping again; then the default experiment.
demo: bootstrap
	$(SUDO) $(VENV)/bin/hpnlab topo show hpn
	$(SUDO) $(VENV)/bin/hpnlab up hpn --pingall --no-cli
	$(SUDO) $(VENV)/bin/hpnlab up hpn --fail h5:nic0:p0 --pingall --no-cli
	$(SUDO) $(VENV)/bin/hpnlab run experiments/precise_vs_ecmp.yaml

clean:
	$(SUDO) $(VENV)/bin/hpnlab clean
