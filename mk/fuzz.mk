# Fuzz targets (docs/reliability.md, "Bad input"): stamps, the plugin's
# configuration, the handover protocol's messages and the stamp annotation
# through a live owner. CI runs each one for a fixed number of executions
# (about 10 s each on 2 cores), not for a duration: Go 1.26's fuzz
# coordinator can fail a duration-bounded run with a bare "context deadline
# exceeded" and no failing input when its deadline races a busy worker
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
# Run them long with
#   make fuzz FUZZTIME=1h
# or one of them with
#   go test -run '^$$' -fuzz '^FuzzHandoverMessages$$' -fuzztime 1h ./internal/protocol
# A failing input is written to the package's testdata/fuzz/<FuzzName>/;
# commit it (renamed to say what it is) with the fix, as a seed.
TEST_EXTRA += fuzz

# FUZZTIME, when set, is the budget of every target (a duration or Nx).
FUZZTIME ?=
FUZZ_PKGS ?= ./stamp ./handover ./internal/protocol ./plugin ./test/fuzz

.PHONY: fuzz
## fuzz: run every fuzz target for its budget, or FUZZTIME each (go runs one target per invocation).
fuzz:
	@set -e; for pkg in $(FUZZ_PKGS); do \
		targets=$$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); \
		test -n "$$targets" || { echo "no fuzz targets in $$pkg"; exit 1; }; \
		for t in $$targets; do \
			case $$t in \
			FuzzParseVersion|FuzzParsePolicy|FuzzPolicyAllow) budget=100000x ;; \
			FuzzVerify) budget=40000x ;; \
			FuzzHandoverMessages) budget=15000x ;; \
			*) budget=6000x ;; \
			esac; \
			budget=$${FUZZTIME:-$$budget}; \
			echo "fuzz $$pkg $$t ($$budget)"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $$budget $$pkg; \
		done; \
	done
