# Model checking of the handover protocol with spin (issue 7): the Promela
# model handover/model/handover.pml, checked exhaustively by
# handover/model/check.sh, which installs spin (and gcc) with apt-get when run
# as root and missing. See docs/model.md.
TEST_EXTRA += model

.PHONY: model model-findings
## model: model-check the handover protocol (spin): the model must hold, the broken variants must fail.
model:
	@bash handover/model/check.sh

## model-findings: reproduce the counterexamples of docs/model.md "Findings" (MODEL_TRAILS=DIR keeps them).
model-findings:
	@bash handover/model/check.sh findings
