# sbxd - plain Makefile. `make run` builds and starts sbxd; `make test` runs the suite.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
LIBDIR = $(PREFIX)/lib
INCDIR = $(PREFIX)/include
SYSCONFDIR ?= /etc
UNITDIR ?= /lib/systemd/system

VERSION = 0.1.0
SOVERSION = 1
B ?= build

CC ?= cc
PKGS = jansson libcurl yaml-0.1 duktape libprotobuf-c
WARN = -Wall -Wextra -Wformat=2 -Wmissing-prototypes -Wstrict-prototypes -Wwrite-strings -Wshadow \
	-Wno-unused-parameter
OPT ?= -O2 -g
SAN ?=
CFLAGS_BASE = -std=gnu11 $(OPT) $(WARN) $(SAN) -D_GNU_SOURCE -DSBX_VERSION=\"$(VERSION)\" \
	-Iproto -Idaemon -Iclient/include -I$(B)/gen
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS_ALL = $(CFLAGS_BASE) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS_D = $(PKG_LIBS) -lev -lm

PROTO_GEN = $(B)/gen/modal_api.pb-c.c
DAEMON_SRC = $(wildcard daemon/*.c daemon/core/*.c daemon/rpc/*.c daemon/io/*.c daemon/providers/*/*.c) \
	proto/sbx_chan.c
# The runtime both isolate workers share (channel frames, hardening steps).
WK_SRC = $(wildcard daemon/workers/common/*.c)
WK_OBJ = $(patsubst %.c,$(B)/obj/%.o,$(WK_SRC))
WORKER_SRC = $(filter-out daemon/workers/duktape/main.c,$(wildcard daemon/workers/duktape/*.c)) $(WK_SRC)
WORKER_OBJ = $(patsubst %.c,$(B)/obj/%.o,$(WORKER_SRC))
DAEMON_OBJ = $(patsubst %.c,$(B)/obj/%.o,$(DAEMON_SRC)) $(B)/gen/modal_api.pb-c.o \
	$(B)/gen/task_command_router.pb-c.o
DAEMON_LIB_OBJ = $(filter-out $(B)/obj/daemon/main.o,$(DAEMON_OBJ))
CLIENT_SRC = $(wildcard client/src/*.c)
CLIENT_OBJ = $(patsubst %.c,$(B)/pic/%.o,$(CLIENT_SRC))
CTL_SRC = $(wildcard client/sbxctl/*.c)
CTL_OBJ = $(patsubst %.c,$(B)/obj/%.o,$(CTL_SRC))
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
ITEST_SRC = $(filter-out %_kit.c,$(wildcard tests/integration/*.c))
ITEST_BIN = $(patsubst tests/integration/%.c,$(B)/tests/%,$(ITEST_SRC))
PTEST_SRC = $(wildcard tests/providers/ptest_*.c)
PTEST_BIN = $(patsubst tests/providers/%.c,$(B)/tests/%,$(PTEST_SRC))
BENCH_SRC = $(wildcard tests/bench/*.c)
BENCH_BIN = $(patsubst tests/bench/%.c,$(B)/bench/%,$(BENCH_SRC))
AGENT_SRC = $(wildcard agent/*.c)
# The js provider's worker: JavaScriptCore, plus the TypeScript stripper
# (sucrase from npm, pinned in daemon/workers/jsc/strip/package-lock.json)
# bundled by esbuild into one script that is embedded in the binary.
JSC_PKG = javascriptcoregtk-4.1
JSW_SRC = $(wildcard daemon/workers/jsc/*.c)
JSW_OBJ = $(patsubst %.c,$(B)/obj/%.o,$(JSW_SRC)) $(B)/obj/daemon/workers/jsc/embed.o $(WK_OBJ)
STRIP_JS = $(B)/gen/strip.js

.PHONY: all run test asan valgrind bench install clean deps test-deps check-style fuzz fuzz-build fuzz-bins \
	install-dist deb
all: $(B)/sbxd $(B)/sbxd-worker $(B)/sbxd-jsworker $(B)/sbxctl $(B)/libsbx.so.$(SOVERSION) $(B)/libsbx.a \
	$(if $(AGENT_SRC),$(B)/sbx-init) $(UNIT_BIN) $(ITEST_BIN) $(PTEST_BIN) $(BENCH_BIN)

# -- build ------------------------------------------------------------------
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@
$(B)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fPIC -fvisibility=hidden -DSBX_BUILDING_LIB -MMD -MP -c $< -o $@

# Modal's messages: generated from the project's cut-down proto by protoc-c.
$(B)/gen/modal_api.pb-c.c $(B)/gen/modal_api.pb-c.h: proto/modal/modal_api.proto
	@mkdir -p $(B)/gen
	protoc-c --proto_path=proto/modal --c_out=$(B)/gen proto/modal/modal_api.proto
$(B)/gen/modal_api.pb-c.o: $(B)/gen/modal_api.pb-c.c
	$(CC) $(CFLAGS_ALL) -Wno-missing-braces -I$(B)/gen -c $< -o $@
# The TaskCommandRouter's messages (they use modal_api's PTYInfo and SecretSource).
$(B)/gen/task_command_router.pb-c.c $(B)/gen/task_command_router.pb-c.h: \
		proto/modal/task_command_router.proto proto/modal/modal_api.proto
	@mkdir -p $(B)/gen
	protoc-c --proto_path=proto/modal --c_out=$(B)/gen proto/modal/task_command_router.proto
$(B)/gen/task_command_router.pb-c.o: $(B)/gen/task_command_router.pb-c.c $(B)/gen/modal_api.pb-c.h
	$(CC) $(CFLAGS_ALL) -Wno-missing-braces -I$(B)/gen -c $< -o $@
$(DAEMON_OBJ): | $(B)/gen/modal_api.pb-c.h $(B)/gen/task_command_router.pb-c.h

$(B)/sbxd: $(DAEMON_OBJ)
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_D)
$(B)/sbxd-worker: $(WORKER_OBJ) $(B)/obj/daemon/workers/duktape/main.o $(B)/obj/proto/sbx_chan.o
	$(CC) $(SAN) -o $@ $^ $(shell pkg-config --libs duktape jansson) -lm
$(B)/obj/daemon/workers/jsc/%.o: daemon/workers/jsc/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(shell pkg-config --cflags $(JSC_PKG)) -MMD -MP -c $< -o $@
$(B)/obj/daemon/workers/jsc/embed.o: daemon/workers/jsc/embed.S daemon/workers/jsc/prelude.js $(STRIP_JS)
	@mkdir -p $(dir $@)
	$(CC) -c -DPRELUDE_JS='"daemon/workers/jsc/prelude.js"' -DSTRIP_JS='"$(STRIP_JS)"' $< -o $@
$(STRIP_JS): daemon/workers/jsc/strip/package.json daemon/workers/jsc/strip/package-lock.json \
		daemon/workers/jsc/strip/entry.js
	@mkdir -p $(B)/strip $(B)/gen
	cp daemon/workers/jsc/strip/package.json daemon/workers/jsc/strip/package-lock.json \
		daemon/workers/jsc/strip/entry.js $(B)/strip/
	cd $(B)/strip && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	$(B)/strip/node_modules/.bin/esbuild $(B)/strip/entry.js --bundle --format=iife \
		--minify --target=es2020 --log-level=warning --outfile=$@
$(B)/sbxd-jsworker: $(JSW_OBJ) $(B)/obj/proto/sbx_chan.o
	$(CC) $(SAN) -o $@ $^ $(shell pkg-config --libs $(JSC_PKG) jansson) -lm
$(B)/libsbx.a: $(CLIENT_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(B)/libsbx.so.$(SOVERSION): $(CLIENT_OBJ)
	$(CC) $(SAN) -shared -Wl,-soname,libsbx.so.$(SOVERSION) -o $@ $^ $(shell pkg-config --libs jansson)
	ln -sf libsbx.so.$(SOVERSION) $(B)/libsbx.so
# sbxctl cp makes and extracts its side of a tar stream with the agent's code.
$(B)/sbxctl: $(CTL_OBJ) $(B)/obj/agent/tar.o $(B)/libsbx.a
	$(CC) $(SAN) -o $@ $(CTL_OBJ) $(B)/obj/agent/tar.o $(B)/libsbx.a $(PKG_LIBS) -lev -lm

# The Docker agent is static: it must run in images with no libc at all.
$(B)/sbx-init: $(AGENT_SRC) $(wildcard agent/*.h) proto/sbx_chan.c proto/sbx_chan.h
	@mkdir -p $(B)
	$(CC) -std=gnu11 -Os $(WARN) -D_GNU_SOURCE -Iproto -static -s \
		-o $@ $(AGENT_SRC) proto/sbx_chan.c

# sbxctl mcp's bottom floors, tested on their own (no daemon objects).
MCP_UNIT_OBJ = $(B)/obj/client/sbxctl/mcp_util.o $(B)/obj/client/sbxctl/mcp_stdio.o
$(B)/tests/test_mcp_stdio: tests/unit/test_mcp_stdio.c $(MCP_UNIT_OBJ) tests/testhelp.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(SAN) -Itests -Iclient -o $@ $< $(MCP_UNIT_OBJ) $(PKG_LIBS) -lev -lm
$(B)/tests/%: tests/unit/%.c $(DAEMON_LIB_OBJ) $(WORKER_OBJ) $(B)/libsbx.a tests/testhelp.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(SAN) -Itests -o $@ $< $(filter %/fakeprov.o %/agent_kit.o,$^) \
		$(DAEMON_LIB_OBJ) $(WORKER_OBJ) $(B)/libsbx.a $(LDLIBS_D)
# unit22 (issue 22): the fake-provider kit (tests/unit/fakeprov.h), linked
# into the unit tests that drive the core or rpc/ through it.
FAKEPROV_OBJ = $(B)/obj/tests/unit/fakeprov.o
FAKEPROV_TESTS = test_chan test_docker_hijack test_rpc test_session test_sandbox test_output \
	test_api_process test_process
$(FAKEPROV_OBJ): CFLAGS_ALL += -Itests
$(FAKEPROV_OBJ): tests/unit/fakeprov.h
$(patsubst %,$(B)/tests/%,$(FAKEPROV_TESTS)): $(FAKEPROV_OBJ) tests/unit/fakeprov.h
# The sbx-init tests (test_agent.c, test_agent_init.c) share tests/unit/agent_kit.h.
AGENT_KIT_OBJ = $(B)/obj/tests/unit/agent_kit.o
$(AGENT_KIT_OBJ): tests/unit/agent_kit.h
$(B)/tests/test_agent $(B)/tests/test_agent_init: $(AGENT_KIT_OBJ) tests/unit/agent_kit.h
$(B)/tests/%: tests/integration/%.c $(B)/libsbx.a tests/testhelp.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(SAN) -Itests -Iclient -o $@ $< $(filter %/own_kit.o,$^) \
		$(B)/libsbx.a $(PKG_LIBS) -lev -lm
# The integration tests with an sbxd of their own share tests/integration/own_kit.h.
OWN_KIT_OBJ = $(B)/obj/tests/integration/own_kit.o
$(OWN_KIT_OBJ): CFLAGS_ALL += -Itests -Iclient
$(OWN_KIT_OBJ): tests/integration/own_kit.h tests/itest.h
$(B)/tests/itest_bounds $(B)/tests/itest_limits16: $(OWN_KIT_OBJ) tests/integration/own_kit.h
$(B)/tests/%: tests/providers/%.c $(B)/libsbx.a tests/testhelp.h tests/itest.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(SAN) -Itests -Iclient -o $@ $< \
		$(filter %/pt_kit.o %/dk_kit.o %/dk_suite.o %/md_kit.o,$^) \
		$(B)/libsbx.a $(PKG_LIBS) -lev -lm
# Every provider test shares tests/providers/pt_kit.h (calls as another uid,
# loopback HTTP, digests); Docker's and Modal's kits are built on it.
PT_KIT_OBJ = $(B)/obj/tests/providers/pt_kit.o
$(PT_KIT_OBJ): CFLAGS_ALL += -Itests -Iclient
$(PT_KIT_OBJ): tests/providers/pt_kit.h tests/itest.h
$(PTEST_BIN): $(PT_KIT_OBJ) tests/providers/pt_kit.h
# The Docker provider tests' shared kit (tests/providers/dk_kit.h), linked into
# each ptest_docker* binary.
DK_KIT_OBJ = $(B)/obj/tests/providers/dk_kit.o
$(DK_KIT_OBJ): CFLAGS_ALL += -Itests -Iclient
$(DK_KIT_OBJ): tests/providers/dk_kit.h tests/itest.h
$(filter $(B)/tests/ptest_docker%,$(PTEST_BIN)): $(DK_KIT_OBJ) tests/providers/dk_kit.h
# The main Docker suite, one binary per feature (docker.sh runs them all),
# shares its sbxd, config and calls (tests/providers/dk_suite.h).
DK_SUITE_OBJ = $(B)/obj/tests/providers/dk_suite.o
DK_SUITE_BIN = $(addprefix $(B)/tests/,ptest_docker ptest_docker_proc ptest_docker_policy \
	ptest_docker_restart ptest_docker_stream ptest_docker_engine)
$(DK_SUITE_OBJ): CFLAGS_ALL += -Itests -Iclient
$(DK_SUITE_OBJ): tests/providers/dk_suite.h tests/providers/dk_kit.h tests/itest.h
$(DK_SUITE_BIN): $(DK_SUITE_OBJ) tests/providers/dk_suite.h
# The main Modal suite, one binary per feature (modal.sh runs them in turn),
# shares the fake's control port and its calls (tests/providers/md_kit.h).
MD_KIT_OBJ = $(B)/obj/tests/providers/md_kit.o
MD_KIT_BIN = $(addprefix $(B)/tests/,ptest_modal ptest_modal_life ptest_modal_outage \
	ptest_modal_restart ptest_modal_fs ptest_modal_ws)
$(MD_KIT_OBJ): CFLAGS_ALL += -Itests -Iclient
$(MD_KIT_OBJ): tests/providers/md_kit.h tests/itest.h
$(MD_KIT_BIN): $(MD_KIT_OBJ) tests/providers/md_kit.h
$(B)/bench/%: tests/bench/%.c $(B)/libsbx.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(SAN) -Itests -Iclient -o $@ $< $(B)/libsbx.a $(PKG_LIBS) -lev -lm

# -- libFuzzer harnesses (tests/fuzz) ------------------------------------------------
# Built with clang into build-fuzz with ASan + UBSan (every UB aborts).
# `make fuzz` runs each harness FUZZ_SECONDS; `make test` runs each briefly.
FUZZ_B = build-fuzz
FUZZ_CC ?= clang-14
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_SECONDS ?= 60
FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN = $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))
# fuzz_agent_init: every agent file but main.c (startup); the agent's calls to
# proc_spawn, fs_frame and alog go to the harness's __wrap_ versions.
FUZZ_AGENT_SRC = $(filter-out agent/main.c,$(AGENT_SRC)) proto/sbx_chan.c
FUZZ_AGENT_WRAP = -Wl,--wrap=proc_spawn,--wrap=fs_frame,--wrap=alog

fuzz-build:
	$(MAKE) B=$(FUZZ_B) CC=$(FUZZ_CC) OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" fuzz-bins
fuzz-bins: $(FUZZ_BIN)
fuzz:
	sh tests/fuzz/run.sh $(FUZZ_B) $(FUZZ_SECONDS) $(FUZZ_B)/corpus

# sbx-init's side: its own sources (no jansson, no libev), through sbx_init_int.h.
$(B)/fuzz/fuzz_agent_init: tests/fuzz/fuzz_agent_init.c $(AGENT_SRC) $(wildcard agent/*.h) proto/sbx_chan.c \
		proto/sbx_chan.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(OPT) $(WARN) $(SAN) -fsanitize=fuzzer -D_GNU_SOURCE -Iproto \
		-Iagent $(FUZZ_AGENT_WRAP) -o $@ $< $(FUZZ_AGENT_SRC)
# sbx-init's tar extractor alone (agent/tar.h).
$(B)/fuzz/fuzz_agent_tar: tests/fuzz/fuzz_agent_tar.c agent/tar.c agent/tar.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(OPT) $(WARN) $(SAN) -fsanitize=fuzzer -D_GNU_SOURCE -Iagent -o $@ $< \
		agent/tar.c
$(B)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_daemon.h $(DAEMON_LIB_OBJ) $(B)/libsbx.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fsanitize=fuzzer -Itests/fuzz -o $@ $< \
		$(DAEMON_LIB_OBJ) $(B)/libsbx.a $(LDLIBS_D)

-include $(shell find $(B) -name '*.d' 2>/dev/null)

# -- the two README commands ----------------------------------------------------
deps:
	@sh tests/deps.sh build
test-deps:
	@sh tests/deps.sh test

run: deps
	$(MAKE) all
	SBXD_SOCKET=$${SBXD_SOCKET:-$(CURDIR)/$(B)/sbxd.sock} ./$(B)/sbxd --foreground

test: test-deps
	$(MAKE) all
	sh tests/run.sh $(B)

asan:
	$(MAKE) B=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		SBX_SANITIZED=1 sh tests/run.sh build-asan

valgrind: all
	SBX_VALGRIND=1 sh tests/run.sh $(B)

# BASE=REV: that commit's daemon beside this one, interleaved (tests/bench/base.sh).
bench: all
	@if [ -n "$(BASE)" ]; then sh tests/bench/base.sh "$(BASE)" $(B); \
	else sh tests/bench/run.sh $(B); fi

# The house style (tests/style/check.sh): banned functions, and the layout of
# .clang-format once .clang-format-enforced exists. `make test` runs it too.
check-style:
	@sh tests/style/check.sh

# -- install --------------------------------------------------------------------
install: all install-dist
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)/sbx \
		$(DESTDIR)$(SYSCONFDIR)/sbxd $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/libexec/sbxd
	install -m 755 $(B)/sbxd $(B)/sbxctl $(DESTDIR)$(BINDIR)/
	install -m 755 $(B)/sbxd-worker $(B)/sbxd-jsworker $(DESTDIR)$(PREFIX)/libexec/sbxd/
	if [ -f $(B)/sbx-init ]; then install -m 755 $(B)/sbx-init $(DESTDIR)$(PREFIX)/libexec/sbxd/; fi
	install -m 755 $(B)/libsbx.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libsbx.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libsbx.so
	install -m 644 $(B)/libsbx.a $(DESTDIR)$(LIBDIR)/
	install -d $(DESTDIR)$(INCDIR)/sbx/adapters
	install -m 644 client/include/sbx/*.h proto/sbx_proto.h $(DESTDIR)$(INCDIR)/sbx/
	install -m 644 client/adapters/*.h $(DESTDIR)$(INCDIR)/sbx/adapters/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' client/libsbx.pc.in \
		> $(DESTDIR)$(LIBDIR)/pkgconfig/libsbx.pc
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' systemd/sbxd.service \
		> $(DESTDIR)$(UNITDIR)/sbxd.service
	install -m 644 systemd/sbxd.socket $(DESTDIR)$(UNITDIR)/
	install -m 644 config/sbxd.yaml $(DESTDIR)$(SYSCONFDIR)/sbxd/sbxd.yaml.sample
	# the service reads sbxd.yaml: install the sample there unless one exists
	[ -f $(DESTDIR)$(SYSCONFDIR)/sbxd/sbxd.yaml ] || \
		install -m 644 config/sbxd.yaml $(DESTDIR)$(SYSCONFDIR)/sbxd/sbxd.yaml

# -- what a host installs besides the binaries (issue 19) -------------------------
# Man pages, shell completions (made by sbxctl itself), sysusers.d (the
# socket's group) and tmpfiles.d (the runtime directory), the docs the units'
# Documentation= points at. `make deb` builds Debian packages from this tree.
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/sbxd
SYSTEMD_LIBDIR ?= $(PREFIX)/lib
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/vendor-completions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
install-dist: $(B)/sbxctl
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSTEMD_LIBDIR)/sysusers.d \
		$(DESTDIR)$(SYSTEMD_LIBDIR)/tmpfiles.d $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	for m in sbxctl.1 sbxd.yaml.5 sbxd.8; do \
		sed -e 's|@VERSION@|$(VERSION)|g' man/$$m | gzip -9n \
			> $(DESTDIR)$(MANDIR)/man$${m##*.}/$$m.gz || exit 1; done
	install -m 644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -m 644 config/README.md $(DESTDIR)$(DOCDIR)/config.md
	install -m 644 systemd/sbxd.sysusers $(DESTDIR)$(SYSTEMD_LIBDIR)/sysusers.d/sbxd.conf
	install -m 644 systemd/sbxd.tmpfiles $(DESTDIR)$(SYSTEMD_LIBDIR)/tmpfiles.d/sbxd.conf
	$(B)/sbxctl completion bash > $(DESTDIR)$(BASHCOMPDIR)/sbxctl
	$(B)/sbxctl completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_sbxctl
	$(B)/sbxctl completion fish > $(DESTDIR)$(FISHCOMPDIR)/sbxctl.fish

# Debian packages sbxd, libsbx1 and libsbx-dev in $(B)/deb/ (packaging/deb.sh).
deb: all
	sh packaging/deb.sh $(B) $(VERSION)

clean:
	rm -rf build build-asan build-fuzz
