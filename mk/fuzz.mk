# Fuzz targets (docs/reliability.md, "Bad input"): stamps, the plugin's
# configuration, the handover protocol's messages and the stamp annotation
# through a live owner. CI runs each one for FUZZTIME; run them long with
#   make fuzz FUZZTIME=1h
# or one of them with
#   go test -run '^$$' -fuzz '^FuzzHandoverMessages$$' -fuzztime 1h ./handover
# A failing input is written to the package's testdata/fuzz/<FuzzName>/;
# commit it (renamed to say what it is) with the fix, as a seed.
TEST_EXTRA += fuzz

FUZZTIME ?= 10s
FUZZ_PKGS ?= ./stamp ./handover ./plugin ./test/fuzz

.PHONY: fuzz
## fuzz: run every fuzz target for FUZZTIME each (go runs one target per invocation).
fuzz:
	@set -e; for pkg in $(FUZZ_PKGS); do \
		targets=$$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); \
		test -n "$$targets" || { echo "no fuzz targets in $$pkg"; exit 1; }; \
		for t in $$targets; do \
			echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done
