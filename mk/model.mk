# Model checking of the handover protocol with spin (issue 7): the Promela
# models handover/model/handover.pml (claim/yield) and handover/model/cut.pml
# (the per-event cut), checked exhaustively by
# handover/model/check.sh, which installs spin (and gcc) with apt-get when run
# as root and missing. See docs/model.md.
TEST_EXTRA += model

.PHONY: model model-cut model-findings
## model: model-check the handover protocol and the per-event cut (spin): the models must hold, the broken variants and the cut's findings must fail.
model:
	@bash handover/model/check.sh

## model-cut: only the per-event cut's runs (cut.pml, with the takeover rules 3-5; about 110 s of CPU, mostly gcc).
model-cut:
	@bash handover/model/check.sh cut

## model-findings: reproduce the counterexamples of docs/model.md "Findings" (MODEL_TRAILS=DIR keeps them).
model-findings:
	@bash handover/model/check.sh findings
