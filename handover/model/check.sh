#!/usr/bin/env bash
# Model-checks the handover protocol (handover/model/handover.pml) and the
# per-event cut (handover/model/cut.pml, runs named cut-*) with spin.
# See docs/model.md.
#
#   check.sh            the correct model, exhaustively, in every configuration
#                       below (must report no violation), and the deliberately
#                       broken variants (each must report one); ends with
#                       "model: N passed, M failed" and fails if M > 0.
#   check.sh cut        only the runs of the per-event cut (cut.pml)
#   check.sh findings   the findings of docs/model.md: each run of one that
#                       is still there must report a violation of the
#                       expected assertion, each run of a fixed one must
#                       hold; counterexamples are written to $MODEL_TRAILS
#                       (default: a temporary directory).
#
# Needs spin and a C compiler; installs them with apt-get when run as root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# model_of NAME: the model a run checks (cut-* runs: cut.pml)
model_of() { if [[ $1 == cut-* ]]; then echo "$here/cut.pml"; else echo "$here/handover.pml"; fi; }
mode=${1:-check}

# ---- tools ----------------------------------------------------------------
need=()
command -v spin >/dev/null 2>&1 || need+=(spin)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if ((${#need[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "model: ${need[*]} not installed, and not root to install it: run 'apt-get update && apt-get install -y ${need[*]}' as root" >&2
		exit 1
	fi
	echo "model: installing ${need[*]} (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq "${need[@]}" >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/nri-handover-model.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ---- one verification run -------------------------------------------------
# verify NAME "SPIN -D FLAGS" "EXTRA GCC FLAGS" HASHBITS
# Builds the verifier in $work/NAME and runs it; leaves pan.out there.
verify() {
	local name=$1 defs=$2 cflags=$3 w=$4 dir=$work/$1 src pml
	src=$(model_of "$name")
	pml=$(basename "$src")
	mkdir -p "$dir"
	cp "$src" "$dir/$pml"
	echo "$pml" >"$dir/model"
	echo "$defs" >"$dir/defs"
	(
		cd "$dir"
		# shellcheck disable=SC2086
		spin $defs -a "$pml" >spin.out 2>&1 || { cat spin.out; exit 1; }
		# -DSAFETY: safety properties only (assertions); VECTORSZ: the state
		# vector is about 330-460 bytes.
		# shellcheck disable=SC2086
		gcc -O2 -DSAFETY -DVECTORSZ=2048 $cflags -o pan pan.c >gcc.out 2>&1 || { cat gcc.out; exit 1; }
		# -E: a crashed instance's processes stop wherever they are, so
		# "invalid end states" are expected; the model checks instead, at
		# the end of every run, that the runtime delivered every event.
		./pan -E -m50000 -w"$w" >pan.out 2>&1 || true
	)
}

# summary NAME: "states stored, depth, errors, seconds" of $work/NAME/pan.out
field() { [[ -f $work/$1/pan.out ]] && sed -n "$2" "$work/$1/pan.out" | head -1 || true; }
summary() {
	local states depth errors secs
	states=$(field "$1" 's/^ *\([0-9][0-9.e+]*\) states, stored.*/\1/p')
	depth=$(field "$1" 's/.*depth reached \([0-9]*\),.*/\1/p')
	errors=$(field "$1" 's/.*errors: \([0-9]*\).*/\1/p')
	secs=$(field "$1" 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p')
	echo "${states:-?} states stored, depth ${depth:-?}, errors ${errors:-?}, ${secs:-?} s"
}
errors_of() { field "$1" 's/.*errors: \([0-9]*\).*/\1/p'; }
complete() { [[ -f $work/$1/pan.out ]] && ! grep -qE "max search depth too small|out of memory" "$work/$1/pan.out"; }
violation() { field "$1" 's/^pan:1: \(.*\) (at depth [0-9]*)$/\1/p'; }

# replay NAME: the counterexample of a run, step by step (same -D flags).
replay() {
	local d=$work/$1
	[[ -f $d/model ]] || return 0
	# shellcheck disable=SC2046
	(cd "$d" && spin $(cat defs) -t -p -g -l "$(cat model)" 2>&1)
}

passed=0
failed=0

# expect_clean NAME: the run must have finished with no error.
expect_clean() {
	local name=$1 what=$2 e
	e=$(errors_of "$name")
	if [[ $e == 0 ]] && complete "$name"; then
		echo "  ok   $name ($what): $(summary "$name")"
		return 0
	fi
	echo "  FAIL $name ($what): $(summary "$name")"
	echo "       $(violation "$name")"
	sed -n '/^pan:/p' "$work/$name/pan.out" | head -5 | sed 's/^/       /'
	replay "$name" | tail -40 | sed 's/^/       /' || true
	return 1
}

# expect_violation NAME WHAT [TEXT]: the run must report an assertion
# violation (of the assertion containing TEXT, if given).
expect_violation() {
	local name=$1 what=$2 pattern=${3:-} e
	e=$(errors_of "$name")
	if [[ -n $e && $e != 0 ]] && [[ -z $pattern || $(violation "$name") == *"$pattern"* ]]; then
		echo "  ok   $name ($what): $(summary "$name")"
		echo "       caught: $(violation "$name")"
		if [[ -n ${MODEL_TRAILS:-} ]]; then
			mkdir -p "$MODEL_TRAILS"
			replay "$name" >"$MODEL_TRAILS/$name.trail.txt" 2>&1 || true
			echo "       counterexample: $MODEL_TRAILS/$name.trail.txt"
		fi
		return 0
	fi
	echo "  FAIL $name ($what): no violation${pattern:+ of the assertion with '$pattern'} found: $(summary "$name")"
	[[ -n $e && $e != 0 ]] && echo "       $(violation "$name")"
	return 1
}

start=$(date +%s)
echo "model: $(spin -V 2>&1 | head -1)"

# Run "name|spin -D flags|gcc flags|hash bits|..." entries, as many at a time
# as there are cores, in the order given (the longest first).
run_all() {
	local jobs r name defs cflags w
	jobs=$(nproc 2>/dev/null || echo 2)
	for r in "$@"; do
		IFS='|' read -r name defs cflags w _ <<<"$r"
		while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
		verify "$name" "$defs" "$cflags" "$w" &
	done
	wait || true
}

if [[ $mode == findings ]]; then
	export MODEL_TRAILS=${MODEL_TRAILS:-$work/trails}
	[[ $MODEL_TRAILS == "$work/trails" ]] && echo "model: counterexamples are kept only for this run; set MODEL_TRAILS=DIR to keep them"
	# name|spin -D flags|gcc flags|hash bits|expect|assertion|description
	# expect "violation": still reproduced, the counterexample must violate
	# the assertion containing the given text; "holds": fixed, the run must
	# find no violation.
	declare -a runs=(
		"F2-recovery|-DNI=3 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=4 -DFAULTMASK=4 -DNO_STOP -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DCHECK_RECOVERY|-DCOLLAPSE|25|holds||fixed: ownership comes back after a crash of the 2nd newcomer (a stale Yield is refused past its deadline)"
		"F9-late-owner|-DNI=3 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=3 -DFAULTMASK=4 -DNO_STOP -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DOWNER_LATE|-DCOLLAPSE|24|violation|promotedMid|a late take-back repeats an event after the owner yielded mid-event to a crashed taker"
		"F4-publish-window|-DNI=2 -DNEV=2 -DMAXFAULT=1 -DFAULT_DROP -DNO_CRASH -DNO_STOP -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DPUBLISH_WINDOW|-DCOLLAPSE|24|violation|promotedMid|a stall between the deadline check and the rename publishes after the drop"
		"F8-takeback-race|-DNI=2 -DNEV=1 -DMAXFAULT=0 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DTAKEBACK_RACE||24|violation|promotedMid|a take-back without the lock, decided against an overdue claim, lands after the taker owns"
		"F8b-takeback-no-owner|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXSYNC=4 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DTAKEBACK_RACE -DCHECK_RECOVERY -DNO_I2 -DNO_I3||24|violation|inchain[0]|... and can leave both instances retired for good"
		"F7-overrun|-DNI=2 -DNEV=1 -DMAXFAULT=0 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DCHECK_OVERRUN -DGRANTED_ONLY||24|violation|lossy|a granted taker stalls past its settle deadline before ready: its predecessor's overdue take-back finds it owner and stands down, then it gives ownership back to nobody (roles only; the register never left the predecessor)"
		"F7x-overrun-before|-DNI=2 -DNEV=1 -DMAXFAULT=0 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DCHECK_OVERRUN -DGRANTED_ONLY -DOLD_TAKEBACK -DNO_RUNBY_CHECK||24|violation|lossy|the code of eb09357: a granted taker that overruns its deadline before publishing returns at once: awaitTakeBack finds the name already elsewhere"
		"F10-takeback-window|-DNI=2 -DNEV=1 -DMAXFAULT=0 -DMAXSYNC=3 -DMAXOVERRUN=0 -DMAXNOTREADY=1 -DTAKEBACK_WINDOW||24|holds||fixed: a not-ready taker waits until another instance answers as owner (awaitTakeBack polls Status, f7b7ddf)"
		"F10x-takeback-window-before|-DNI=2 -DNEV=1 -DMAXFAULT=0 -DMAXSYNC=3 -DMAXOVERRUN=0 -DMAXNOTREADY=1 -DTAKEBACK_WINDOW -DOLD_TAKEBACK||24|violation|lossy|the code of eb09357: a not-ready taker returns as soon as the name moves, before its predecessor is owner again"
		"F1-strict-at-most-once|-DNI=2 -DNEV=4 -DMAXFAULT=1 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DSTRICT_AT_MOST_ONCE||24|violation|actedBy==0|an event acted on twice around a crash"
		"F5-sync-role|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXSYNC=4 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DCHECK_SYNC_ROLE||24|holds||fixed: ready (the author's Synchronize) runs only on the owner: ClaimThen checks superseded(), runBy does not start ready past its settle deadline"
		"F5x-sync-role-before|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXSYNC=4 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DCHECK_SYNC_ROLE -DNO_RUNBY_CHECK||24|violation|rdy|the code before: runBy started ready past its settle deadline, after which an overdue take-back may have superseded the instance"
		"F6b-stop-during-claim|-DNI=2 -DNEV=4 -DMAXFAULT=1 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DSTOP_DURING_CLAIM||24|violation|lossy|a newcomer stopped during its claim: Leave and disconnect end the fence before the old owner takes back"
	)
	run_all "${runs[@]}"
	ok=0 bad=0 fixed=0
	for r in "${runs[@]}"; do
		IFS='|' read -r name _ _ _ expect pattern what <<<"$r"
		if [[ $expect == holds ]]; then
			if expect_clean "$name" "$what"; then fixed=$((fixed + 1)); else bad=$((bad + 1)); fi
		elif expect_violation "$name" "$what" "$pattern"; then
			ok=$((ok + 1))
		else
			bad=$((bad + 1))
		fi
	done
	echo "model findings: $ok reproduced, $fixed fixed (hold), $bad unexpected ($(($(date +%s) - start)) s)"
	((bad == 0))
	exit
fi

# ---- the runs ------------------------------------------------------------
# name|spin -D flags|gcc flags|hash bits|description
# c4 (three instances, one crash or stop, no overrun) is split by the
# instance the fault hits (FAULTMASK) and, for the 2nd newcomer, by the kind
# of fault: together its runs cover what one run would. The o* runs add a
# claim that overruns its deadline, d1 the stall-and-drop fault, f6a a stop
# racing with the instance's own claim, n1 a newcomer whose ready (the
# author's Synchronize) fails. MAXNOTREADY (ready failures) is 0 elsewhere:
# one more choice of the taker multiplies the state space like a fault.
all="-DCHECK_LEAVE"
correct=(
	"c4-stop-of-2|-DNI=3 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=3 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DFAULTMASK=4 -DNO_CRASH $all|-DCOLLAPSE|25|3 instances, 1 event, a stop of the 2nd newcomer"
	"c4-fault-on-1|-DNI=3 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=3 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DFAULTMASK=2 $all|-DCOLLAPSE|25|3 instances, 1 event, a crash or stop of the 1st newcomer"
	"c4-fault-on-0|-DNI=3 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=3 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DFAULTMASK=1 $all|-DCOLLAPSE|24|3 instances, 1 event, a crash or stop of the old owner"
	"c4-crash-of-2|-DNI=3 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=3 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DFAULTMASK=4 -DNO_STOP $all|-DCOLLAPSE|24|3 instances, 1 event, a crash of the 2nd newcomer"
	"o1-overrun-fault|-DNI=2 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=2 -DMAXOVERRUN=1 -DMAXNOTREADY=0 $all|-DCOLLAPSE|24|2 instances, 1 event, a claim overrun and a crash or stop"
	"c2-three-no-fault|-DNI=3 -DNEV=3 -DMAXFAULT=0 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DCHECK_RECOVERY $all|-DCOLLAPSE|24|3 instances, 3 events, no fault"
	"o2-overrun|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXSYNC=4 -DMAXOVERRUN=1 -DMAXNOTREADY=0 -DCHECK_RECOVERY $all|-DCOLLAPSE|24|2 instances, 2 events, a claim overrun"
	"c1-two-two-faults|-DNI=2 -DNEV=4 -DMAXFAULT=2 -DMAXSYNC=5 -DMAXOVERRUN=0 -DMAXNOTREADY=0 $all|-DCOLLAPSE|24|2 instances, 4 events, 2 faults"
	"n1-not-ready|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXSYNC=4 -DMAXOVERRUN=0 -DMAXNOTREADY=1 -DCHECK_RECOVERY $all|-DCOLLAPSE|24|2 instances, 2 events, the newcomer's ready (author's Synchronize) fails: given back, taken back inside its Synchronize"
	"d1-drop|-DNI=2 -DNEV=1 -DMAXFAULT=1 -DMAXSYNC=2 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DFAULT_DROP -DNO_CRASH -DNO_STOP $all|-DCOLLAPSE|24|2 instances, 1 event, a stall past the runtime's timeout (drop); MAXSYNC=2: no resync or reconnection after it"
	"f6a-stop-during-claim|-DNI=2 -DNEV=4 -DMAXFAULT=1 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DSTOP_DURING_CLAIM -DNO_I3 $all||24|2 instances, a stop racing with the own claim: nothing acts after Leave"
)
broken=(
	"b1-unfenced-claim|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DBROKEN_UNFENCED_CLAIM||22|claim outside the Synchronize fence"
	"b2-no-name-check|-DNI=2 -DNEV=2 -DMAXFAULT=0 -DMAXOVERRUN=0 -DMAXNOTREADY=0 -DBROKEN_NO_FENCING||22|Enter without the owner-name check"
)

# The per-event cut (cut.pml; docs/model.md "The per-event cut"). The
# cut-* "must hold" runs check the algorithm with the three fixes the model
# needs (FIX_*); the cut-x* runs are its findings: each must still report the
# violation of the assertion containing the given text (a fixed finding's
# run checks the code without its fix, NO_*/no FIX_*, next to a must-hold
# run with it).
fx="-DFIX_QUIET_BIT -DFIX_CLAIM_CLEARS_SEEN -DFIX_FAIL_RESTORES"
rx="$fx -DRULES -DWINDOW -DNOREPEAT -DFIX_MASK -DFIX_R5"
x14="-DNEV=3 ${rx/-DNOREPEAT/} -DFAIL1 -DCLOSE -DSTANDBY -DDROP -DFAULT_NO_GAP"
x15="-DNEV=3 ${rx/-DNOREPEAT/} -DFAIL1 -DSTANDBY -DRELEASE -DGONE"
cut_correct=(
	"cut-two-newcomers|-DNEV=3 $fx -DN2 -DN2FAIL=2 -DFAIL1 -DCLOSE -DCHECK_HEIR||22|3 events, newcomer 1 and 2 each succeed or fail, in any order, idle rule, retired owner closes"
	"cut-second-fails|-DNEV=4 $fx -DN2 -DFAIL1 -DCLOSE -DCHECK_HEIR||20|4 events, a 2nd newcomer that fails, at any time: no miss, newcomer 1 stays heir or owner"
	"cut-no-idle|-DNEV=4 $fx -DN2 -DN2FAIL=2 -DFAIL1 -DCLOSE -DNO_IDLE||20|4 events, two newcomers, the event path alone (no idle rule)"
	"cut-gap-6|-DNEV=6 $fx -DFAIL1 -DCLOSE||20|6 events (2 keys), one newcomer (succeeds or fails), events in the gap, idle rule"
	"cut-keys3|-DNEV=4 -DNKEY=3 $fx -DFAIL1 -DCLOSE||20|4 events over 3 keys, one newcomer"
	# Rules 3-5 of decide (RULES; docs/model.md "Takeovers: rules 3, 4 and 5"):
	# a standby (S) in the chain, the faults that motivate the rules, and two
	# events after the checked ones (probes) for a late declaration. $rx: the
	# code's rules with the two fixes the model needs (FIX_MASK, FIX_R5), the
	# declaration of rule 4 covering the window since the owner's last
	# recorded event (WINDOW), and the assumptions of the must-hold runs: no
	# event has the key of the one before it (NOREPEAT, finding C6) and no
	# fault while the newcomer is between its Synchronize and its append
	# (FAULT_NO_GAP, C7).
	"cut-overrun|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DABANDON -DFAULT_NO_GAP||22|rule 3: the runtime gives up on the acting connection inside its handler (it finishes later or never); A, N1 (succeeds or fails), S, close"
	"cut-overrun-killed|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DABANDON -DNO_LATE -DCHECK_PROMPT -DFAULT_NO_GAP||22|rule 3, the handler never returns: the next connection that may take over does, at once (no event left to rule 4)"
	"cut-overrun-alo|-DNEV=3 $rx -DALO -DFAIL1 -DSTANDBY -DABANDON -DDROP -DFAULT_NO_GAP||22|rules 3 and 4 with at-least-once: an event in doubt is acted on at least once"
	"cut-dropped|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DDROP -DFAULT_NO_GAP||22|rule 4: the runtime drops the owner between events (frozen, killed)"
	"cut-dropped-mid|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DDROP_MID -DFAULT_NO_GAP||22|rule 4: the runtime drops the owner between two calls of an event, before its own (frozen: its request times out), an heir right after A handed over to it included (sighting.handed)"
	"cut-dropped-handover|-DNEV=3 ${rx/-DWINDOW/} -DFAIL1 -DCLOSE -DSTANDBY -DDROP_MID -DFAULT_NO_GAP -DCHECK_DECL_EVENTS||22|rule 4 after a handover: A hands over to N1 and closes, the runtime drops N1 before its call; S, called before A or between A and N1, takes over at the next event declaring the handed one alone (no WINDOW: no more events declared skipped than faults)"
	"cut-released|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DRELEASE -DGONE||22|rule 5: the old owner leaves and releases the register (heir appended or none), the heir's idle and gone paths"
	"cut-released-standby|-DNEV=4 $rx -DNO_N1 -DSTANDBY -DRELEASE|-O1|20|rule 5: the owner releases with no successor; the standby takes over"
	# caller.releaser (bb7709f): A, released, stays in the chain until it
	# disconnects and is called as a releaser (rule 5 for it too; Finish
	# releases again). DISC_BETWEEN: A disconnects between events only;
	# CHECK_RELEASER: then no event is left to S's rule 5 to declare skipped.
	"cut-released-orderly|-DNEV=4 $rx -DNO_N1 -DSTANDBY -DRELEASE -DDISC_BETWEEN -DCHECK_RELEASER|-O1|20|caller.releaser: A releases between S's and its own call of an event and takes it; nothing is declared skipped"
	"cut-released-orderly-heir|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DRELEASE -DGONE -DDISC_BETWEEN -DCHECK_RELEASER||22|as cut-released, A disconnects between events: nothing declared skipped"
	"cut-released-repeat|-DNEV=4 ${rx/-DNOREPEAT/} -DNO_N1 -DSTANDBY -DRELEASE -DDISC_BETWEEN|-O1|20|caller.releaser with repeated keys (no NOREPEAT): an event with the key A acted on last is declared in doubt, not missed"
	# C6 and C9 as fixed in 0384538, with repeated keys (no NOREPEAT); both
	# fixes assume the runtime calls the connections in the chain's order
	# (INORDER: A, S, then N1; cut-x22, cut-x23 show why). $x14, $x15: the
	# configurations of those findings.
	"cut-shared-key|$x14 -DINORDER -DNO_IDLE|-O1|22|C6: A dropped between events, the next with its last key reaches N1 first (its first call, rule 1 skips it): declared at N1's rule-2 takeover (heirUnseen); no idle rule (cut-x20)"
	"cut-gone-repeat|$x15 -DINORDER||22|C9: A releases, N1's gone path takes the register keeping its sighting; unseen, the event with the recorded key is declared in doubt by rule 1"
	# C6 with the idle rule: the configuration of cut-x20 and cut-x21, with
	# their fixes (the heir's unseen first call marked in the word, which
	# holds the idle promotion off; the counter counted once per call)
	# cut-x22's fix (every ambiguous skip of the heir marked, not only its
	# first): the same without INORDER, without and with the idle rule
	"cut-shared-key-flipped|$x14 -DNO_IDLE|-O1|22|C6 with the runtime calling in any order (N1 before A too): every ambiguous skip of N1 marked; the one after A's drop is declared at N1's rule-2 takeover"
	"cut-shared-key-any-order|$x14||22|C6 in any order with N1's idle rule (held off while the mark stands)"
	# NEWEST: a runtime that calls only the newest connection of a name
	# and index (containerd/nri PR 281, work in progress); an older one is
	# called again, unnoticed, once every newer one has closed. NPROBE=3:
	# a fallback connection needs two calls to take over by rule 4.
	"cut-newest-rollout|-DNEV=4 ${rx/-DNOREPEAT/} -DFAIL1 -DCLOSE -DNEWEST|-O1|22|NEWEST: A, N1 (succeeds or fails), idle, A closes, repeated keys: N1 alone is called once appended; its first event with A's last key is declared (heirUnseen), nothing else missed"
	"cut-newest-fallback|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DDROP -DFAULT_NO_GAP -DNEWEST -DNPROBE=3|-O1|22|NEWEST, S older than A: the runtime drops the newest owner; S is called again unnoticed and takes over by rule 4 at its second call, declaring the first"
	"cut-newest-overrun|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DABANDON -DFAULT_NO_GAP -DNEWEST -DNPROBE=3|-O1|22|NEWEST, S older than A: the runtime gives up on the newest owner inside its handler; rules 3 and 4 at the fallback"
	"cut-newest-released|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DRELEASE -DGONE -DDISC_BETWEEN -DNEWEST -DNPROBE=3|-O1|22|NEWEST: A releases (heir appended or none) and disconnects between events; rule 5 at the fallback"
	"cut-newest-at-most-once|-DNEV=3 ${rx/-DNOREPEAT/} -DFAIL1 -DCLOSE -DSTANDBY -DABANDON -DNEWEST -DNO_MISS_CHECK|-O1|22|NEWEST, no event acted on twice (misses not checked: C10, C11) with repeated keys, an abandoned handler, a close at any moment"
	"cut-newest-at-most-once-snewer|$x14 -DNEWEST -DSNEWER -DNPROBE=3 -DNO_MISS_CHECK|-O1|22|NEWEST, S newer than A (it shadows A), A's drop, repeated keys: no event acted on twice"
	"cut-newest-shadowed|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DNEWEST -DSNEWER -DNPROBE=3|-O1|20|C10 fixed: NEWEST, S newer than A is called alone and skips, marking the word (unrecorded); N1's idle rule holds off, its takeover declares the event"
	"cut-heir-gap|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DDROP|-O1|22|C7 fixed by the standby's mark (C10's fix): the owner dropped while N1 is between Synchronize and append (no FAULT_NO_GAP); the event that reached only S is marked, N1's takeover declares it"
	"cut-newest-superseded|-DNEV=3 $rx -DN2 -DN2FAIL=2 -DFAIL1 -DCLOSE -DNEWEST||22|C10 fixed: NEWEST, N2 appended, then N1 claims: N2, the newest, neither owner nor heir, marks what it skips; N1's takeover declares it"
	# CPTAKE: the control plane (handover.pml's findings F4, F8, F9; docs/model.md
	# "The control plane under the cut") takes the register outright at any
	# moment, for A, S or N1 (CPMASK), whoever owns it: no event acted on
	# twice, none missed unsaid
	"cut-cp-standby|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DCLOSE -DCPTAKE -DCPMASK=9 -DMAXCP=2|-O1|20|control plane: A and S take the register from each other at any moment (two takes), A closes"
	"cut-cp-standby-repeat|-DNEV=3 ${rx/-DNOREPEAT/} -DNO_N1 -DSTANDBY -DCLOSE -DCPTAKE -DCPMASK=9 -DMAXCP=2|-O1|20|control plane: as cut-cp-standby with repeated keys"
	"cut-cp-heir|-DNEV=3 $rx -DFAIL1 -DCLOSE -DCPTAKE -DCPMASK=3|-O1|22|control plane: A's stale take-back from N1 (or N1's promotion), N1 succeeds or fails, idle rule, A closes (F8, F9)"
	"cut-cp-heir-repeat|-DNEV=3 ${rx/-DNOREPEAT/} -DFAIL1 -DCLOSE -DCPTAKE -DCPMASK=3|-O1|22|control plane: as cut-cp-heir with repeated keys"
	"cut-cp-faults|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DABANDON -DDROP -DCPTAKE -DCPMASK=9 -DMAXCP=2|-O1|20|control plane: two takes and an abandoned handler or a dropped owner"
	"cut-cp-released-standby|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DRELEASE -DCPTAKE -DCPMASK=8|-O1|20|control plane: S's instance made owner while A releases and takes events back as a releaser: a released register is left to rule 5"
	"cut-cp-released-heir|-DNEV=2 $rx -DSTANDBY -DRELEASE -DNO_IDLE -DCPTAKE -DCPMASK=8|-O1|22|control plane: S's instance made owner after A released with N1 heir: the take declares a gap"
	# C12: an instance replaces its connection (R replaces S's: a catch-up,
	# a take-back) while the owner is dropped or abandoned; the right to
	# take over moves to R at its first call (Coordinator.takerLocked)
	"cut-replaced-dropped|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DREPLACE -DDROP|-O1|20|C12: S's connection is being replaced by R (its Synchronize returned, not appended); the runtime drops A: S, still in the chain, takes over by rule 4 until R is called"
	"cut-replaced-overrun|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DREPLACE -DABANDON|-O1|20|C12, rule 3: the runtime gives up on A inside its handler while R is not appended: S takes over"
	"cut-replaced-repeat|-DNEV=3 ${rx/-DNOREPEAT/} -DNO_N1 -DSTANDBY -DREPLACE -DDROP -DINORDER|-O1|20|C12 with repeated keys, in chain order"
	"cut-replaced-cp|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DREPLACE -DABANDON -DDROP -DCPTAKE -DCPMASK=13 -DMAXCP=2|-O1|22|C12 with the control plane's outright takes (for the connection that may take over) and a fault"
	"cut-replaced-newcomer|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DREPLACE -DDROP|-O1|22|C12 beside a newcomer N1 (succeeds or fails) and A's drop at any moment"
	# the events the harness hands late, once, as reached by no handler
	# (late[], Config.OnUnacted): acted on by nobody before
	"cut-cp-handed-dropped|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DDROP_MID -DFAULT_NO_GAP -DCPTAKE -DCPMASK=1 -DMAXCP=1|-O1|22|A hands over to N1, the runtime drops N1 before its call, A's control plane takes the register back outright (a promotion): at its next call A finds the handed event acted on by nobody and hands it late"
	"cut-shared-key-idle|$x14 -DINORDER|-O1|22|C6 with N1's idle rule: after N1's ambiguous first skip the idle rule holds off (or, at the hold's bound, promotes declaring it); a rule-2 CAS that fails (the idle re-arm) and is retried still declares it"
)
# name|spin -D flags|gcc flags|hash bits|assertion|description
# (-O1: the searches of the small runs take less than compiling them)
cut_broken=(
	"cut-x1-as-designed|-DNEV=3 -DCLOSE||20|acts[e]<=1|cut.md as written: the idle rule reads the events counter, then CASes the word; a same-key event in between leaves the word as it was (ABA): duplicate"
	"cut-x2-claim-keeps-seen|-DNEV=3 -DFIX_QUIET_BIT -DFIX_FAIL_RESTORES -DN2 -DNO_IDLE -DCLOSE||20|acts[e]==1|a claim that keeps heirSeen: the old heir's seen bit vouches for a newcomer not in the chain (it fails): miss"
	"cut-x3-fail-clears-heir|-DNEV=2 -DFIX_QUIET_BIT -DFIX_CLAIM_CLEARS_SEEN -DN2 -DCHECK_HEIR||20|Wheir==|a failed 2nd newcomer clears heir: the 1st, in the chain, is neither heir nor owner for good"
	"cut-x4-idle-early|-DNEV=2 $fx -DIDLE_EARLY -DCLOSE||20|acts[e]==1|the idle rule's Q expires before the append (timing T1 broken): miss"
	"cut-x5-leave-timeout|-DNEV=3 $fx -DLEAVE_TIMEOUT||20|acts[e]==1|the old owner closes on its leave timeout while still owner: the next same-key event: miss"
	"cut-x6-idle-seen0|-DNEV=3 $fx -DIDLE_OS0||20|acts[e]==1|an idle promotion that leaves ownerSeen 0: the next same-key event: miss"
	"cut-x7-no-t2|-DNEV=3 $fx -DNO_T2||20|acts[e]<=1|Q may pass between two calls of one event (timing T2 broken): duplicate"
	# rules 3-5: each rule left out must be caught
	"cut-x29-handed-dropped|-DNEV=3 $rx -DNO_HANDED -DNO_HANDED_SEEN -DFAIL1 -DCLOSE -DSTANDBY -DDROP_MID -DFAULT_NO_GAP|-O1|22|acts[j]>=1|the code before sighting.handed (NO_HANDED) and the standby's reading of a handover (NO_HANDED_SEEN): A hands over at E, the runtime drops N1 before its call for E; A skips the next event and takes over a call later: E is missed, declared by nobody"
	"cut-x30-handover-drop-two|-DNEV=3 ${rx/-DWINDOW/} -DFAIL1 -DCLOSE -DSTANDBY -DDROP_MID -DFAULT_NO_GAP -DCHECK_DECL_EVENTS -DNO_HANDED_SEEN||22|cc<=faults|the code before (NO_HANDED_SEEN; cut-dropped-handover without it): A hands over and closes, N1 is dropped before its call; S skips the next event too and declares two for one fault"
	"cut-x8-no-rule3|-DNEV=4 $rx -DNO_RULE3 -DNO_N1 -DSTANDBY -DABANDON -DNO_LATE -DCHECK_PROMPT|-O1|20|decl[j]&2|rule 3 left out: a handler that never returns is found only by rule 4, events later"
	"cut-x9-no-rule4|-DNEV=4 $rx -DNO_RULE4 -DNO_N1 -DSTANDBY -DDROP|-O1|20|acts[j]>=1|rule 4 left out: an owner dropped between events: every later event missed"
	"cut-x10-no-rule5|-DNEV=4 $rx -DNO_RULE5 -DNO_N1 -DSTANDBY -DRELEASE|-O1|20|acts[j]>=1|rule 5 left out: a released register: every later event missed"
	# findings C5-C10 (docs/model.md): the code without a fix, or an assumption dropped
	"cut-x11-release-mid-event|-DNEV=4 ${rx/-DFIX_R5/} -DNO_N1 -DSTANDBY -DRELEASE|-O1|20|acts[e]<=1|C5: rule 5 as before the fix: the owner acts, releases, the standby called next for the same event acts again: duplicate"
	"cut-x12-mask-window|-DNEV=3 ${rx/-DFIX_MASK/} -DFAIL1 -DCLOSE -DSTANDBY -DDROP -DFAULT_NO_GAP|-O1|22|acts[j]>=1|C8: the owner mask as before the fix: an heir that promotes itself and freezes before it stores its mask disables rule 4"
	"cut-x13-heir-gap|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DDROP -DNO_STANDBY_MARK|-O1|22|acts[j]>=1|C7 as before the standby's mark (NO_STANDBY_MARK; cut-heir-gap without it): the owner dropped while an heir is between Synchronize and append: the event that reached only S is never declared"
	"cut-x14-shared-key|$x14 -DINORDER -DNO_IDLE -DNO_HEIR_UNSEEN|-O1|22|acts[j]>=1|C6 as before 0384538 (NO_HEIR_UNSEEN; cut-shared-key without the fix): after the owner silently dropped, an event with its last key: the heir's first call skips it (rule 1), S cannot tell: missed, not declared"
	"cut-x15-gone-unseen|$x15 -DINORDER -DNO_GONE_SEEN|-O1|22|acts[j]>=1|C9 as before 0384538 (NO_GONE_SEEN; cut-gone-repeat without the fix): the heir's gone path takes the register with ownerSeen 0: the next event with the recorded key is skipped"
	"cut-x16-one-for-many|-DNEV=4 ${rx/-DWINDOW -DNOREPEAT/} -DNO_N1 -DSTANDBY -DDROP|-O1|20|acts[j]>=1|C6: counted one by one, rule 4 declares one event where several with the recorded key were missed"
	# C6 and C9: the code before the fixes of cut-x20, cut-x21, and what is left
	"cut-x20-idle-unseen|$x14 -DINORDER -DNO_IDLE_UNSEEN|-O1|22|acts[j]>=1|C6, the idle rule as before its fix (NO_IDLE_UNSEEN; cut-shared-key-idle without it): A dropped, N1's first call skips an event with A's last key (rule 1), N1's idle rule promotes it: owner at the next event, nothing declares the skipped one"
	"cut-x21-unseen-retry|$x14 -DINORDER -DCOUNT_EACH_TRY|-O1|22|evcount==nrec|C6, the counter as before its fix (COUNT_EACH_TRY; cut-shared-key-idle without it): N1's rule-2 CAS fails once (its idle re-arm) and the event is counted twice (before the word mark, the retry took that count for an event recorded since: not declared)"
	"cut-x22-unseen-flipped|$x14 -DNO_IDLE -DMARK_FIRST_ONLY|-O1|22|acts[j]>=1|C6, only N1's first skip marked as before its fix (MARK_FIRST_ONLY; cut-shared-key-flipped without it), the runtime calls N1 before A: a later skip of N1 (rule 1, after A's act cleared heirSeen) is as ambiguous as its first; A dropped: missed, not declared"
	"cut-x23-gone-flipped|-DNEV=2 ${rx/-DNOREPEAT/} -DRELEASE -DGONE|-O1|20|acts[j]>=1|C9 left, N1 called before A: N1 skips an event with A's last key (rule 1, seen), A releases, the gone take keeps the seen bit, A skips: missed, not declared"
	# NEWEST (containerd/nri PR 281): what it loses unsaid (C10, C11)
	"cut-x24-newest-shadowed|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DNEWEST -DSNEWER -DNPROBE=3 -DNO_STANDBY_MARK|-O1|20|acts[j]>=1|C10 as before its fix (NO_STANDBY_MARK; cut-newest-shadowed without it): NEWEST, a connection neither owner nor heir is newer than the owner (a standby registered after it): called alone it skips; N1's idle promotion (no event write seen) then hides the event from rule 4: missed, not declared"
	"cut-x25-newest-fallback-retired|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DABANDON -DFAULT_NO_GAP -DNEWEST -DNPROBE=3|-O1|22|acts[j]>=1|C11: NEWEST, the runtime gives up on the newest owner; the events fall back to the retired old owner, which may not take over (or closes): missed until a connection that may take over is called, not declared in the register"
	# the control plane's outright take (CPTAKE) as before the fixes of
	# docs/model.md "The control plane under the cut"
	# C13 (open): a standby called before the heir and the owner in every event
	"cut-x33-standby-first|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DORDER_SNA -DCHECK_DECL_BOUND||22|ndecl<=|C13 (open): the runtime calls S, then N1, then A (S and the newcomer at a lower index than the owner: the demo, -order alternate), no fault: S marks each event before A records it (cutWord.unrecorded), N1 takes over at one of them, its own, and declares the mark: a false alarm, with a catch-up (3 in 8 clean handovers of the demo)"
	"cut-x26-cp-unseen|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DCLOSE -DCPTAKE -DCPMASK=9 -DNO_CP_UNSEEN|-O1|20|acts[j]>=1|control plane, the code before: S's instance takes the register from A, unseen; the next event with A's last key: S's rule 1 skips it unsaid"
	"cut-x27-cp-heir-gap|-DNEV=2 $rx -DSTANDBY -DRELEASE -DNO_IDLE -DCPTAKE -DCPMASK=8 -DNO_CP_HEIR_GAP|-O1|22|acts[j]>=1|control plane, the code before: A released with N1 heir; S's take between S's and N1's calls of an event: N1 skips it, nobody declares it"
	"cut-x28-cp-released|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DRELEASE -DCPTAKE -DCPMASK=8 -DNO_CP_RULE5|-O1|20|acts[j]>=1|control plane, the code before: A released (no heir) between S's call and its own; S's take makes the releaser skip: nobody acts, nothing declared"
	# caller.releaser (bb7709f) left out: A, released, skips the event S skipped before the release
	# C12 as before its fix: the right moves to R when its Synchronize returns
	"cut-x32-replaced-too-early|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DREPLACE -DDROP -DNO_MT_AT_CALL|-O1|20|acts[j]>=1|C12, the code before (NO_MT_AT_CALL; cut-replaced-dropped without the fix): R's Synchronize returned, the runtime drops A before R is appended: S, in the chain, may not take over; the events that reach it alone are missed, not declared in the register (the code declared them as a gap at R's first act)"
	"cut-x17-no-releaser|-DNEV=4 ${rx/-DNOREPEAT/} -DNO_N1 -DSTANDBY -DRELEASE -DDISC_BETWEEN -DNO_RELEASER|-O1|20|acts[j]>=1|releaser left out, a repeated key: S skips E (A owns), A releases and leaves, A skips E: missed, not declared"
	"cut-x18-no-releaser-declared|-DNEV=4 $rx -DNO_N1 -DSTANDBY -DRELEASE -DDISC_BETWEEN -DCHECK_RELEASER -DNO_RELEASER|-O1|20|decl[j]&2|releaser left out, keys not repeated: the same miss, declared by S's rule 5 at the next event (C5's declaration)"
	"cut-x19-releaser-reached|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DRELEASE -DGONE -DREACH_RELEASER||22|!(rls)|vacuity: the must-hold cut-released runs reach a releaser's take"
	"cut-x34-late-reached|-DNEV=3 $rx -DFAIL1 -DCLOSE -DSTANDBY -DDROP -DFAULT_NO_GAP -DREACH_LATE||22|!(late[j])|vacuity: cut-dropped reaches rule 4's late hand of the skipped event"
	"cut-x35-late-owner-reached|-DNEV=3 $rx -DFAIL1 -DSTANDBY -DDROP_MID -DFAULT_NO_GAP -DCPTAKE -DCPMASK=1 -DMAXCP=1 -DREACH_LATE_OWNER|-O1|22|assertion violated 0|vacuity: cut-cp-handed-dropped reaches the owner's late hand of a recorded event nobody acted on"
	"cut-x36-late-mark-reached|-DNEV=3 $rx -DNO_N1 -DSTANDBY -DCLOSE -DCPTAKE -DCPMASK=9 -DMAXCP=2 -DREACH_LATE_MARK|-O1|20|assertion violated 0|vacuity: cut-cp-standby reaches the late hand of a take's own standby mark, at the taker's next call"
	"cut-x31-handover-reached|-DNEV=3 ${rx/-DWINDOW/} -DFAIL1 -DCLOSE -DSTANDBY -DDROP_MID -DFAULT_NO_GAP -DCHECK_DECL_EVENTS -DREACH_R4H||22|!(r4h)|vacuity: cut-dropped-handover reaches rule 4 read from the counter (S called before A)"
)

# check.sh cut: the per-event cut's runs only
if [[ $mode == cut ]]; then correct=() broken=(); fi

run_all "${correct[@]}" "${cut_correct[@]}" "${broken[@]}" "${cut_broken[@]}"

if ((${#correct[@]})); then
echo "model: correct model (exhaustive; must hold)"
ok=1
for r in "${correct[@]}"; do
	IFS='|' read -r name _ _ _ what <<<"$r"
	expect_clean "$name" "$what" || ok=0
done
if ((ok)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "model: broken variants (must be caught)"
ok=1
for r in "${broken[@]}"; do
	IFS='|' read -r name _ _ _ what <<<"$r"
	expect_violation "$name" "$what" || ok=0
done
if ((ok)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi

echo "model: the per-event cut (cut.pml, with its fixes; exhaustive; must hold)"
ok=1
for r in "${cut_correct[@]}"; do
	IFS='|' read -r name _ _ _ what <<<"$r"
	expect_clean "$name" "$what" || ok=0
done
if ((ok)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "model: the per-event cut's findings (must be caught)"
ok=1
for r in "${cut_broken[@]}"; do
	IFS='|' read -r name _ _ _ pattern what <<<"$r"
	expect_violation "$name" "$what" "$pattern" || ok=0
done
if ((ok)); then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "model: $passed passed, $failed failed ($(($(date +%s) - start)) s)"
((failed == 0))
